use super::*;

/// A ClientHello body with the given extensions (type, data).
fn hello_body(exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut b = vec![3, 3];
    b.extend_from_slice(&[7; 32]);
    b.push(32);
    b.extend_from_slice(&[9; 32]);
    b.extend_from_slice(&[0, 4, 0x13, 0x01, 0x13, 0x02]);
    b.extend_from_slice(&[1, 0]);
    let mut e = Vec::new();
    for (kind, data) in exts {
        e.extend_from_slice(&kind.to_be_bytes());
        e.extend_from_slice(&(data.len() as u16).to_be_bytes());
        e.extend_from_slice(data);
    }
    b.extend_from_slice(&(e.len() as u16).to_be_bytes());
    b.extend_from_slice(&e);
    b
}

fn sni_ext(names: &[&str]) -> (u16, Vec<u8>) {
    let mut list = Vec::new();
    for n in names {
        list.push(0);
        list.extend_from_slice(&(n.len() as u16).to_be_bytes());
        list.extend_from_slice(n.as_bytes());
    }
    let mut d = (list.len() as u16).to_be_bytes().to_vec();
    d.extend_from_slice(&list);
    (0, d)
}

/// The handshake message in records of at most `chunk` bytes.
fn records(body: &[u8], chunk: usize) -> Vec<u8> {
    let mut msg = vec![1];
    msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    msg.extend_from_slice(body);
    let mut out = Vec::new();
    for part in msg.chunks(chunk) {
        out.extend_from_slice(&[22, 3, 1]);
        out.extend_from_slice(&(part.len() as u16).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

fn with_sni(name: &str) -> Vec<u8> {
    records(
        &hello_body(&[(10, vec![0, 2, 0, 29]), sni_ext(&[name])]),
        16384,
    )
}

#[test]
fn sni_is_read_and_normalised() {
    let got = parse(&with_sni("API.Example.Test.")).unwrap().unwrap();
    assert_eq!(got.sni.as_deref(), Some("api.example.test"));
}

#[test]
fn a_lone_dot_is_not_a_host_name() {
    // Found by the fuzzer: "." lost its trailing dot and became an empty name.
    assert!(parse(&with_sni(".")).is_err());
    assert!(parse(&with_sni("")).is_err());
}

#[test]
fn a_hello_without_sni_says_so() {
    let wire = records(&hello_body(&[(10, vec![0, 2, 0, 29])]), 16384);
    assert_eq!(parse(&wire).unwrap().unwrap().sni, None);
    let no_ext = records(&hello_body(&[])[..hello_body(&[]).len() - 2], 16384);
    assert_eq!(parse(&no_ext).unwrap().unwrap().sni, None);
}

#[test]
fn a_hello_split_across_reads_needs_all_of_it() {
    let wire = with_sni("a.example.test");
    for cut in 0..wire.len() {
        assert_eq!(parse(&wire[..cut]), Ok(None), "cut at {cut}");
    }
    assert!(parse(&wire).unwrap().is_some());
}

#[test]
fn a_hello_spanning_records_is_reassembled() {
    let padding = (21, vec![0u8; 3000]);
    let body = hello_body(&[padding, sni_ext(&["big.example.test"])]);
    for chunk in [1, 100, 1000] {
        let wire = records(&body, chunk);
        let got = parse(&wire).unwrap().unwrap();
        assert_eq!(
            got.sni.as_deref(),
            Some("big.example.test"),
            "chunk {chunk}"
        );
        assert_eq!(parse(&wire[..wire.len() - 1]), Ok(None));
    }
}

#[test]
fn what_is_not_a_plain_hello_is_refused() {
    assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Err(SniError::NotTls));
    assert_eq!(parse(&[22, 9, 9, 0, 1, 1]), Err(SniError::NotTls));
    let two = records(
        &hello_body(&[sni_ext(&["a.test"]), sni_ext(&["b.test"])]),
        16384,
    );
    assert_eq!(
        parse(&two),
        Err(SniError::Malformed("two server_name extensions"))
    );
    let names = records(&hello_body(&[sni_ext(&["a.test", "b.test"])]), 16384);
    assert_eq!(parse(&names), Err(SniError::Malformed("two host names")));
    let bad_name = records(&hello_body(&[sni_ext(&["a test"])]), 16384);
    assert!(matches!(parse(&bad_name), Err(SniError::Malformed(_))));
    let mut alert_inside = records(&hello_body(&[sni_ext(&["a.test"])]), 50);
    alert_inside[50 + 5] = 21;
    assert!(matches!(parse(&alert_inside), Err(SniError::Malformed(_))));
    let server_hello = {
        let mut w = with_sni("a.test");
        w[5] = 2;
        w
    };
    assert!(matches!(parse(&server_hello), Err(SniError::Malformed(_))));
}

#[test]
fn the_search_is_bounded() {
    // A hello that claims to be larger than the bound.
    let mut wire = vec![22, 3, 1, 0, 4, 1, 0x01, 0, 0];
    assert_eq!(parse(&wire), Err(SniError::TooLarge));
    // Records that never complete the message.
    wire = Vec::new();
    let body = hello_body(&[(21, vec![0u8; 20000])]);
    let all = records(&body, 16000);
    wire.extend_from_slice(&all[..MAX_HELLO_BYTES.min(all.len()) - 1]);
    assert_eq!(parse(&wire), Ok(None));
    let truncated_body = records(&[0u8; 10], 16384);
    assert!(matches!(
        parse(&truncated_body),
        Err(SniError::Malformed(_))
    ));
}
