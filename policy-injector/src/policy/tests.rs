use super::*;

#[test]
fn default_equals_embedded_text() {
    assert_eq!(
        Policy::from_toml_str(DEFAULT_POLICY_TOML).unwrap(),
        Policy::default()
    );
}

#[test]
fn empty_file_is_the_default() {
    assert_eq!(Policy::from_toml_str("").unwrap(), Policy::default());
}

#[test]
fn to_toml_string_round_trips() {
    let mut p = Policy {
        mode: Mode::Audit,
        ..Policy::default()
    };
    p.runsc.extra_flags.insert("fdlimit".into(), "4096".into());
    p.capabilities.allow = vec!["CAP_NET_BIND_SERVICE".into()];
    assert_eq!(Policy::from_toml_str(&p.to_toml_string()).unwrap(), p);
    assert_eq!(
        Policy::from_toml_str(&Policy::default().to_toml_string()).unwrap(),
        Policy::default()
    );
}
