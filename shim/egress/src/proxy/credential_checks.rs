//! What a request on a credential connection must not carry, checked before its `METHOD /path`
//! rules (see `terminate.rs`), and the refusal of an IP literal that is a credential host's
//! address. Frameworks and the proxies in front of an API read more than the request line:
//! method-override and URL-rewrite headers, `;` path parameters, escapes decoded once more,
//! header names with `_` for `-`. A rule that looks only at the request line would let the
//! workload spend the key on what the rules refuse; so anything a server could read as another
//! method, path or host is refused with a 403 that names the check.

use std::net::IpAddr;

use policy_injector::egress::path_problem;

use super::{Proxy, Stop};
use crate::audit::{EgressEvent, LookupSource};
use crate::guard::embedded_v4s;

/// Headers a framework or a proxy in front of the upstream may take as the request's method.
const METHOD_OVERRIDES: [&str; 5] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-method",
    "x-forwarded-method",
];

/// Headers one may take as the request's path or URL (IIS URL Rewrite, Symfony and Laravel's
/// trusted proxies, nginx and Envoy setups), or as its host (a virtual host the credential
/// was not meant for).
const URL_OVERRIDES: [&str; 11] = [
    "x-original-url",
    "x-rewrite-url",
    "x-original-uri",
    "x-forwarded-uri",
    "x-forwarded-url",
    "x-forwarded-path",
    "x-forwarded-prefix",
    "x-envoy-original-path",
    "x-forwarded-host",
    "x-host",
    "forwarded",
];

/// Headers that frame the request or name its host: the proxy reads them by their exact names,
/// so a look-alike (`Transfer_Encoding`) that a server takes as one of them would frame or
/// route the request otherwise than the proxy checked it.
const FRAMING: [&str; 5] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "te",
];

/// Query parameters Laravel, Express's `method-override` and others take as the method.
const QUERY_METHOD_OVERRIDES: [&str; 1] = ["_method"];

/// A header name as servers compare them: case-insensitive, and `_` the same as `-` (CGI,
/// PHP, WSGI and some proxies turn both into `_`). Every other punctuation mark counts as `-`
/// too: the proxy would rather drop a harmless header than forward one a server reads as the
/// credential.
pub(super) fn header_key(name: &str) -> String {
    name.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b.to_ascii_lowercase())
            } else {
                '-'
            }
        })
        .collect()
}

/// Whether a server could read header `a` as header `b`.
pub(super) fn same_header(a: &str, b: &str) -> bool {
    header_key(a) == header_key(b)
}

/// A request refused on a credential connection: its rule and its reason (answered 403).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Refused {
    pub rule: &'static str,
    pub reason: String,
}

/// The checks before the rules: no override header, no `_method` in the query, a path no
/// server reads as another one. `Ok` says nothing of the rules themselves.
pub(super) fn check_request(
    method: &str,
    target: &str,
    headers: &[(String, String)],
    host: &str,
    policy: &str,
) -> Result<(), Refused> {
    for (name, _) in headers {
        let key = header_key(name);
        if FRAMING.contains(&key.as_str()) && !name.eq_ignore_ascii_case(&key) {
            return Err(Refused {
                rule: "credential-override",
                reason: format!(
                    "egress denied: header {name} is refused with the credential for {host} by policy {policy}: servers may read it as {key}, which frames the request"
                ),
            });
        }
        let what = if METHOD_OVERRIDES.contains(&key.as_str()) {
            "as the request's method"
        } else if URL_OVERRIDES.contains(&key.as_str()) {
            "as the request's path or host"
        } else {
            continue;
        };
        return Err(Refused {
            rule: "credential-override",
            reason: format!(
                "egress denied: header {name} is refused with the credential for {host} by policy {policy}: servers may read it {what}, past the credential's rules"
            ),
        });
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    for pair in query.split('&') {
        let name = pair.split_once('=').map_or(pair, |(n, _)| n);
        let name = percent_decoded(name).to_ascii_lowercase();
        if QUERY_METHOD_OVERRIDES.contains(&name.as_str()) {
            return Err(Refused {
                rule: "credential-override",
                reason: format!(
                    "egress denied: query parameter {name} is refused with the credential for {host} by policy {policy}: servers may read it as the request's method, past the credential's rules"
                ),
            });
        }
    }
    if let Some(problem) = path_problem(target) {
        return Err(Refused {
            rule: "credential-path",
            reason: format!(
                "egress denied: {method} {path} has {problem}, which a server could read as another path: refused with the credential for {host} by policy {policy}"
            ),
        });
    }
    Ok(())
}

/// The most of a form body the proxy reads before forwarding it, to look for a method field
/// in it: form posts to APIs are small; a larger one is refused, not passed unchecked.
pub(super) const MAX_FORM_BODY: u64 = 64 * 1024;

/// The two form encodings whose fields frameworks read a method from (Rails' and Symfony's
/// `_method`, Laravel's): URL-encoded and multipart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    UrlEncoded,
    Multipart,
}

/// Whether the request's body is a form, by its Content-Type (any header name servers read as
/// it; parameters ignored).
pub(super) fn form_of(headers: &[(String, String)]) -> Option<Form> {
    headers.iter().find_map(|(name, value)| {
        if header_key(name) != "content-type" {
            return None;
        }
        let media = value
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "application/x-www-form-urlencoded" => Some(Form::UrlEncoded),
            "multipart/form-data" => Some(Form::Multipart),
            _ => None,
        }
    })
}

/// Why a form body cannot be checked before it is read whole: chunked, or over the bound.
pub(super) fn uncheckable_form(
    chunked: bool,
    len: u64,
    host: &str,
    policy: &str,
) -> Option<Refused> {
    let why = if chunked {
        "a chunked form body".to_string()
    } else if len > MAX_FORM_BODY {
        format!("a form body of {len} bytes (over {MAX_FORM_BODY})")
    } else {
        return None;
    };
    Some(Refused {
        rule: "credential-override",
        reason: format!(
            "egress denied: {why} cannot be checked for a method field: refused with the credential for {host} by policy {policy} (send it with Content-Length, at most {MAX_FORM_BODY} bytes)"
        ),
    })
}

/// A form body (whole) must not carry a field servers read as the method.
pub(super) fn check_form(form: Form, body: &[u8], host: &str, policy: &str) -> Result<(), Refused> {
    let found = match form {
        Form::UrlEncoded => String::from_utf8_lossy(body).split('&').any(|pair| {
            let name = pair.split_once('=').map_or(pair, |(n, _)| n);
            let name = percent_decoded(&name.replace('+', " ")).to_ascii_lowercase();
            QUERY_METHOD_OVERRIDES.contains(&name.trim())
        }),
        // A part named `_method`, quoted or not, in any case: its Content-Disposition header.
        Form::Multipart => {
            let text = String::from_utf8_lossy(body).to_ascii_lowercase();
            QUERY_METHOD_OVERRIDES.iter().any(|field| {
                text.contains(&format!("name=\"{field}\""))
                    || text.contains(&format!("name={field}"))
                    || text.contains(&format!("name*=utf-8''{field}"))
            })
        }
    };
    if found {
        return Err(Refused {
            rule: "credential-override",
            reason: format!(
                "egress denied: form field _method is refused with the credential for {host} by policy {policy}: servers may read it as the request's method, past the credential's rules"
            ),
        });
    }
    Ok(())
}

/// `s` with its `%XX` escapes decoded (a malformed one kept as written).
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%')
            .then(|| b.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(v) => {
                out.push(v);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `ip` and the IPv4 addresses it stands for (mapped, NAT64, 6to4 ...): the spellings of one
/// destination.
fn spellings(ip: IpAddr) -> Vec<IpAddr> {
    let mut all = vec![ip];
    if let IpAddr::V6(v6) = ip {
        all.extend(embedded_v4s(v6).into_iter().map(IpAddr::V4));
    }
    all
}

impl Proxy {
    /// A request for an IP literal (which `allow_cidrs` admitted) that is an address of a
    /// credential host, as the proxy resolves that host (its static `hosts` entry, else DNS):
    /// refused. A tunnel to it would reach the credential's upstream without the TLS the proxy
    /// terminates, so without the credential's rules. A lookup that fails refuses too: the
    /// proxy cannot tell the address is not the host's.
    pub(super) async fn refuse_credential_address(&self, ip: IpAddr) -> Result<(), Stop> {
        let asked = spellings(ip);
        let policy = self.policy_name();
        for host in self.plan.credential_hosts() {
            let answers = match self.plan.hosts.get(&host) {
                Some(a) => vec![*a],
                None => {
                    let answer =
                        tokio::time::timeout(self.timeouts.resolve, self.resolver.resolve(&host))
                            .await;
                    let answer = match answer {
                        Ok(Ok(a)) => Ok(a),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(_) => Err("timed out".to_string()),
                    };
                    self.emit(EgressEvent::Lookup {
                        host: host.clone(),
                        source: LookupSource::Dns,
                        answers: answer.clone().unwrap_or_default(),
                        error: answer.as_ref().err().cloned(),
                    });
                    match answer {
                        Ok(a) => a,
                        Err(e) => {
                            return Err(self.denied(
                                "credential-host-address",
                                format!("{ip} may be an address of {host}, which gets a credential from the proxy, and its lookup failed ({e}): policy {policy} allows this address by host name only"),
                            ))
                        }
                    }
                }
            };
            if answers
                .into_iter()
                .flat_map(spellings)
                .any(|a| asked.contains(&a))
            {
                return Err(self.denied(
                    "credential-host-address",
                    format!("{ip} is an address of {host}, which gets a credential from the proxy: policy {policy} allows it by host name only (connect to {host})"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    fn check(target: &str, hs: &[(&str, &str)]) -> Result<(), Refused> {
        check_request("GET", target, &headers(hs), "api.example.test", "p")
    }

    #[test]
    fn method_and_url_override_headers_are_refused_in_any_spelling() {
        for name in [
            "X-HTTP-Method-Override",
            "x-http-method",
            "X-Method-Override",
            "X_HTTP_Method_Override",
            "x-original-method",
            "X-Original-URL",
            "X-Rewrite-URL",
            "x_original_url",
            "X-Forwarded-Prefix",
            "X-Forwarded-Path",
            "X-Forwarded-Host",
            "Forwarded",
        ] {
            let e = check("/v1/models", &[("accept", "*/*"), (name, "/admin/keys")]).unwrap_err();
            assert_eq!(e.rule, "credential-override", "{name}");
            assert!(
                e.reason.starts_with(&format!("egress denied: header {name} is refused with the credential for api.example.test by policy p")),
                "{}",
                e.reason
            );
        }
        let e = check("/v1/models", &[("Transfer_Encoding", "chunked")]).unwrap_err();
        assert!(
            e.reason.contains("read it as transfer-encoding"),
            "{}",
            e.reason
        );
        // Control: ordinary headers pass, the framing ones by their own names too.
        check(
            "/v1/models",
            &[
                ("accept", "*/*"),
                ("x-request-id", "1"),
                ("x-forwarded-for", "a"),
                ("Content-Length", "0"),
                ("HOST", "api.example.test"),
            ],
        )
        .unwrap();
    }

    #[test]
    fn a_method_field_in_a_form_body_is_refused_and_other_fields_pass() {
        let urlencoded = |b: &str| check_form(Form::UrlEncoded, b.as_bytes(), "h", "p");
        for body in [
            "_method=DELETE",
            "a=1&_METHOD=put",
            "x=y&%5Fmethod=DELETE",
            "_method+=x",
        ] {
            let e = urlencoded(body).unwrap_err();
            assert_eq!(e.rule, "credential-override", "{body}");
            assert!(e.reason.contains("form field _method"), "{body}: {e:?}");
        }
        for body in ["model=claude&method=x", "a_method=1", ""] {
            assert_eq!(urlencoded(body), Ok(()), "{body}");
        }
        let multipart = |b: &str| check_form(Form::Multipart, b.as_bytes(), "h", "p");
        let part = |name: &str| {
            format!("--b\r\nContent-Disposition: form-data; {name}\r\n\r\nDELETE\r\n--b--\r\n")
        };
        for name in ["name=\"_method\"", "NAME=\"_Method\"", "name=_method"] {
            assert!(multipart(&part(name)).is_err(), "{name}");
        }
        assert_eq!(multipart(&part("name=\"file\"")), Ok(()));
        let headers = |ct: &str| vec![("Content_Type".to_string(), ct.to_string())];
        assert_eq!(
            form_of(&headers("application/x-www-form-urlencoded; charset=utf-8")),
            Some(Form::UrlEncoded)
        );
        assert_eq!(
            form_of(&headers("Multipart/Form-Data; boundary=b")),
            Some(Form::Multipart)
        );
        assert_eq!(form_of(&headers("application/json")), None);
        assert!(uncheckable_form(true, 0, "h", "p").is_some());
        assert!(uncheckable_form(false, MAX_FORM_BODY + 1, "h", "p").is_some());
        assert!(uncheckable_form(false, MAX_FORM_BODY, "h", "p").is_none());
    }

    #[test]
    fn a_method_override_in_the_query_is_refused() {
        for target in [
            "/v1/messages?_method=DELETE",
            "/v1/messages?a=1&_METHOD=DELETE",
            "/v1/messages?%5fmethod=DELETE",
        ] {
            assert_eq!(
                check(target, &[]).unwrap_err().rule,
                "credential-override",
                "{target}"
            );
        }
        check("/v1/messages?method=x&beta=true", &[]).unwrap();
    }

    #[test]
    fn paths_a_server_reads_otherwise_are_refused_naming_why() {
        let e = check("/v1/models/..;/admin/keys", &[]).unwrap_err();
        assert_eq!(
            e,
            Refused {
                rule: "credential-path",
                reason: "egress denied: GET /v1/models/..;/admin/keys has a ; parameter, which a server could read as another path: refused with the credential for api.example.test by policy p".into(),
            }
        );
        for target in [
            "/v1/models/../admin",
            "/v1/models/%2e%2e/admin",
            "/v1/models%2fadmin",
            "/v1/models%5cadmin",
            "/v1/models\\admin",
            "/v1/models/.",
            "/v1//models",
        ] {
            assert_eq!(
                check(target, &[]).unwrap_err().rule,
                "credential-path",
                "{target}"
            );
        }
        check("/v1/models/claude-x?beta=1", &[]).unwrap();
    }

    #[test]
    fn header_names_compare_as_servers_compare_them() {
        assert!(same_header("X_Api_Key", "x-api-key"));
        assert!(same_header("X-API-KEY", "x-api-key"));
        assert!(same_header("x.api.key", "x-api-key"));
        assert!(!same_header("x-api-keys", "x-api-key"));
        assert!(!same_header("xapikey", "x-api-key"));
    }

    #[test]
    fn an_address_spelled_in_ipv6_is_the_same_destination() {
        let v4: IpAddr = "10.213.7.2".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.213.7.2".parse().unwrap();
        let nat64: IpAddr = "64:ff9b::ad5:702".parse().unwrap();
        assert!(spellings(mapped).contains(&v4));
        assert!(spellings(nat64).contains(&v4));
        assert_eq!(spellings(v4), [v4]);
    }
}
