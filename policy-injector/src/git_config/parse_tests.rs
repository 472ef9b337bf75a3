//! The parser against what git 2.39 does (each expectation here was checked with
//! `git config --file F --null --list`; `tests/git_config_oracle.rs` re-checks them).

use super::*;

fn values(src: &str) -> Vec<(String, Value)> {
    values_of(src.as_bytes())
}

fn values_of(src: &[u8]) -> Vec<(String, Value)> {
    parse(src)
        .unwrap_or_else(|e| panic!("{e}"))
        .entries
        .into_iter()
        .map(|e| {
            (
                String::from_utf8_lossy(&e.key.to_git_bytes()).into_owned(),
                e.value,
            )
        })
        .collect()
}

fn one(src: &str) -> Value {
    let v = values(src);
    assert_eq!(v.len(), 1, "{v:?}");
    v.into_iter().next().unwrap().1
}

fn s(v: &str) -> Value {
    Some(v.as_bytes().to_vec())
}

fn problem(src: &[u8]) -> (usize, Problem) {
    match parse(src) {
        Err(ParseError::Malformed { line, problem }) => (line, problem),
        other => panic!("expected a malformed config, got {other:?}"),
    }
}

#[test]
fn a_quoted_value_keeps_its_inner_spaces() {
    assert_eq!(one("[a]\n\tk = \"  x  y  \"\n"), s("  x  y  "));
}

#[test]
fn unquoted_whitespace_runs_become_as_many_spaces() {
    // Git counts each whitespace byte and writes a space for it: a tab becomes a space.
    assert_eq!(one("[a]\n\tk = a  \t b  \n"), s("a    b"));
}

#[test]
fn leading_and_trailing_whitespace_is_dropped() {
    assert_eq!(one("[a]\r\n  k  =  v  \r\n"), s("v"));
}

#[test]
fn whitespace_after_an_empty_quoted_start_is_still_leading() {
    assert_eq!(one("[a]\n\tk = \"\" x\n"), s("x"));
    assert_eq!(one("[a]\n\tk = \" \" x\n"), s("  x"));
}

#[test]
fn quotes_may_open_and_close_anywhere_in_a_value() {
    assert_eq!(one("[a]\nk = \"x\" y \"z\"\n"), s("x y z"));
}

#[test]
fn a_bare_name_is_true_and_an_empty_assignment_is_the_empty_string() {
    assert_eq!(
        values("[a]\n\tk\n\tl =\n\tm = \"\"\n"),
        vec![
            ("a.k".into(), None),
            ("a.l".into(), s("")),
            ("a.m".into(), s(""))
        ]
    );
}

#[test]
fn escapes_in_values_are_decoded() {
    assert_eq!(
        one("[a]\nk = \"\\t\\n\\b\\\\\\\"\"\n"),
        Some(b"\t\n\x08\\\"".to_vec())
    );
    assert_eq!(one("[a]\nk = \\t x\n"), s("\t x"));
}

#[test]
fn an_unknown_escape_in_a_value_is_an_error() {
    assert_eq!(
        problem(b"[a]\nk = v\\r\n"),
        (2, Problem::UnknownEscape(b'r'))
    );
}

#[test]
fn comments_end_a_value_outside_quotes_only() {
    assert_eq!(one("[a]\nk = v # c ; d\n"), s("v"));
    assert_eq!(one("[a]\nk = v;c\n"), s("v"));
    assert_eq!(one("[a]\nk = \"v # c ; d\"\n"), s("v # c ; d"));
}

#[test]
fn a_trailing_backslash_joins_the_next_line_keeping_pending_spaces() {
    assert_eq!(one("[a]\n\tk = a \\\n   b\n"), s("a    b"));
    assert_eq!(one("[a]\nk = \"multi\\\nline\" # c\n"), s("multiline"));
    assert_eq!(one("[a]\nk = \"a\\\r\nb\"\r\n"), s("ab"));
}

#[test]
fn a_comment_line_after_a_continuation_belongs_to_the_value_line() {
    let config = parse(b"[a]\nk = x\\\n# c\nl = y\n").unwrap();
    assert_eq!(config.entries[0].value, s("x"));
    assert_eq!(config.entries[0].span, 4..15);
    assert_eq!(config.entries[1].line, 4);
}

#[test]
fn a_quote_left_open_at_the_end_of_a_line_is_an_error() {
    assert_eq!(
        problem(b"[a]\nk = \"open\n"),
        (2, Problem::UnterminatedQuote)
    );
    assert_eq!(
        problem(b"[a]\nk = \"open\\"),
        (2, Problem::UnterminatedQuote)
    );
}

#[test]
fn a_cr_is_whitespace_unless_quoted_or_before_lf() {
    assert_eq!(one("[a]\nk = x\ry\n"), s("x y"));
    assert_eq!(one("[a]\nk = \"x\ry\"\n"), s("x\ry"));
    assert_eq!(one("[a]\nk = a\r\n"), s("a"));
}

#[test]
fn the_end_of_the_file_ends_the_last_line() {
    assert_eq!(one("[a]\nk=v"), s("v"));
    assert_eq!(one("[a]\nk"), None);
    assert_eq!(one("[a]\nk=v\\"), s("v"));
}

#[test]
fn section_and_variable_names_are_lowercased_and_subsections_are_not() {
    assert_eq!(
        values("[Remote \"Origin\"]\n\tURL = u\n"),
        vec![("remote.Origin.url".into(), s("u"))]
    );
    assert_eq!(values("[a]\nK-1 = v\n"), vec![("a.k-1".into(), s("v"))]);
}

#[test]
fn the_deprecated_dotted_header_lowercases_its_subsection() {
    let config = parse(b"[Remote.Origin]\nurl = u\n").unwrap();
    assert_eq!(config.entries[0].key.subsection(), Some(&b"origin"[..]));
    assert_eq!(
        values("[a.B \"C\"]\nk=v\n"),
        vec![("a.b.C.k".into(), s("v"))]
    );
    assert_eq!(values("[A-b.C]\nk=v\n"), vec![("a-b.c.k".into(), s("v"))]);
}

#[test]
fn a_dotted_header_and_a_quoted_one_name_the_same_key() {
    let dotted = parse(b"[remote.origin]\nurl = u\n").unwrap();
    let quoted = parse(b"[remote \"origin\"]\nurl = u\n").unwrap();
    assert_eq!(dotted.entries[0].key, quoted.entries[0].key);
}

#[test]
fn a_subsection_backslash_keeps_the_next_byte() {
    assert_eq!(
        values("[a\t\"x\\y\\\"z\\\\\"]\nk=v\n"),
        vec![("a.xy\"z\\.k".into(), s("v"))]
    );
    assert_eq!(values("[a \"]\"]\nk=v\n"), vec![("a.].k".into(), s("v"))]);
}

#[test]
fn an_empty_subsection_differs_from_none() {
    let config = parse(b"[a \"\"]\nk=v\n[a.]\nl=w\n[a]\nm\n").unwrap();
    let subs: Vec<_> = config.entries.iter().map(|e| e.key.subsection()).collect();
    assert_eq!(subs, vec![Some(&b""[..]), Some(&b""[..]), None]);
}

#[test]
fn a_header_may_share_its_line_with_a_variable_or_another_header() {
    assert_eq!(
        values("[a] k = v\n[b][c] d=e\n"),
        vec![("a.k".into(), s("v")), ("c.d".into(), s("e"))]
    );
}

#[test]
fn a_variable_on_its_header_line_keeps_the_newline_out_of_its_span() {
    let src = b"[a] k = v\n\tl = w\n";
    let config = parse(src).unwrap();
    assert_eq!(&src[config.entries[0].span.clone()], b"k = v");
    assert_eq!(&src[config.entries[1].span.clone()], b"\tl = w\n");
}

#[test]
fn an_entry_span_covers_its_whole_lines() {
    let src = b"[a]\r\n  k = \"x\\\r\n y\"  # c\r\nl\n";
    let config = parse(src).unwrap();
    assert_eq!(
        &src[config.entries[0].span.clone()],
        b"  k = \"x\\\r\n y\"  # c\r\n"
    );
    assert_eq!(config.entries[1].line, 4);
    assert_eq!(config.entries[0].header, 0);
}

#[test]
fn a_byte_order_mark_is_skipped_only_at_the_start() {
    assert_eq!(
        values_of(b"\xef\xbb\xbf[a]\nk=v\r\n"),
        vec![("a.k".into(), s("v"))]
    );
    assert_eq!(problem(b"\xef\xbb[a]\n").1, Problem::UnexpectedByte(0xef));
    assert_eq!(
        problem(b"[a]\n\xef\xbb\xbfk=v\n"),
        (2, Problem::UnexpectedByte(0xef))
    );
}

#[test]
fn values_need_not_be_utf8() {
    assert_eq!(
        values_of(b"[a]\nk = \xff\xfe\n")[0].1,
        Some(vec![0xff, 0xfe])
    );
}

#[test]
fn vertical_tab_is_not_whitespace_to_git() {
    assert_eq!(one("[a]\nk = x\x0by\n"), s("x\x0by"));
}

#[test]
fn malformed_lines_are_named() {
    let cases: &[(&str, &[u8], usize, Problem)] = &[
        (
            "comment after a bare name",
            b"[a]\n\tk ;c\n",
            2,
            Problem::ExpectedEquals(b';'),
        ),
        (
            "hash after a bare name",
            b"[a]\n\tk#c\n",
            2,
            Problem::ExpectedEquals(b'#'),
        ),
        (
            "name starting with a digit",
            b"[a]\n1k = v\n",
            2,
            Problem::UnexpectedByte(b'1'),
        ),
        (
            "space after the subsection",
            b"[a \"x\" ]\n",
            1,
            Problem::BadSubsection,
        ),
        ("unquoted subsection", b"[a x]\n", 1, Problem::BadSubsection),
        (
            "header over two lines",
            b"[a\n]\n",
            1,
            Problem::UnterminatedHeader,
        ),
        (
            "subsection over two lines",
            b"[a \"x\\\ny\"]\n",
            1,
            Problem::UnterminatedHeader,
        ),
        ("unclosed header", b"[a", 1, Problem::UnterminatedHeader),
        (
            "bad section byte",
            b"[a_b]\n",
            1,
            Problem::BadSectionByte(b'_'),
        ),
        (
            "stray backslash",
            b"[a]\n\\\nk=v\n",
            2,
            Problem::UnexpectedByte(b'\\'),
        ),
        (
            "CR in a name",
            b"[a]\nk\r = v\n",
            2,
            Problem::ExpectedEquals(b'\r'),
        ),
        // Git accepts these three; they are refused because no tool writes them and git's
        // reading of them (a key `k`, a section ``, a cut value) is not worth modelling.
        (
            "variable before any section",
            b"k = v\n",
            1,
            Problem::VariableOutsideSection,
        ),
        (
            "empty section name",
            b"[ \"x\"]\nk=v\n",
            1,
            Problem::EmptySectionName,
        ),
        ("NUL byte", b"[a]\nk = v\x00w\n", 2, Problem::NulByte),
    ];
    for (name, src, line, want) in cases {
        assert_eq!(problem(src), (*line, *want), "{name}");
    }
}

#[test]
fn a_config_over_the_size_limit_is_refused_unread() {
    let big = vec![b'#'; MAX_CONFIG_BYTES + 1];
    assert_eq!(
        parse(&big),
        Err(ParseError::TooLarge {
            size: MAX_CONFIG_BYTES + 1
        })
    );
}

#[test]
fn a_config_with_too_many_entries_is_refused() {
    let mut src = b"[a]\n".to_vec();
    src.extend(b"k\n".repeat(MAX_ENTRIES));
    assert_eq!(parse(&src).unwrap().entries.len(), MAX_ENTRIES);
    src.extend(b"k\n");
    assert_eq!(parse(&src), Err(ParseError::TooManyEntries));
}

#[test]
fn a_section_header_over_the_length_limit_is_refused() {
    let fits = format!("[remote \"{}\"]\nk\n", "x".repeat(MAX_HEADER_BYTES - 6));
    assert!(parse(fits.as_bytes()).is_ok());
    let long = format!("[remote \"{}\"]\nk\n", "x".repeat(MAX_HEADER_BYTES - 5));
    assert_eq!(problem(long.as_bytes()), (1, Problem::HeaderTooLong));
    let long = format!("[{}]\nk\n", "a".repeat(MAX_HEADER_BYTES + 1));
    assert_eq!(problem(long.as_bytes()), (1, Problem::HeaderTooLong));
}

#[test]
fn entries_under_one_header_share_its_key_parts() {
    // A long header repeated over many entries must not be copied per entry.
    let config = parse(b"[remote \"o\"]\nurl = a\nfetch = b\n").unwrap();
    let (a, b) = (&config.entries[0].key, &config.entries[1].key);
    assert!(std::ptr::eq(
        a.subsection().unwrap().as_ptr(),
        b.subsection().unwrap().as_ptr()
    ));
}

#[test]
fn an_error_message_names_the_line() {
    let err = parse(b"[a]\nk = \"open\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "bad git config line 2: a quoted value not closed on its line"
    );
}

#[test]
fn serialized_values_read_back_identically() {
    let key = KeyRef::new("a", Some(b"s \"q\\ ]\r"), "k").unwrap();
    let tricky: &[&[u8]] = &[
        b"",
        b" lead",
        b"trail ",
        b"in  ner",
        b"#hash;semi",
        b"quote\"back\\slash",
        b"nl\ntab\tbs\x08",
        b"cr\rlf",
        b"\t",
        b"\xff",
    ];
    let mut settings: Vec<(&KeyRef, Option<&[u8]>)> = vec![(&key, None)];
    settings.extend(tricky.iter().map(|v| (&key, Some(*v))));
    let text = serialize(settings.iter().copied()).unwrap();
    let back: Vec<(KeyRef, Value)> = parse(&text)
        .unwrap()
        .entries
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect();
    let want: Vec<(KeyRef, Value)> = settings
        .iter()
        .map(|(k, v)| ((*k).clone(), v.map(<[u8]>::to_vec)))
        .collect();
    assert_eq!(back, want);
}

#[test]
fn a_value_with_a_nul_byte_cannot_be_serialized() {
    let key = KeyRef::new("a", None, "k").unwrap();
    assert!(serialize([(&key, Some(&b"x\0y"[..]))]).is_err());
}

#[test]
fn serialize_groups_values_under_one_header_per_section() {
    let a = KeyRef::new("a", None, "k").unwrap();
    let b = KeyRef::new("b", Some(b"x"), "k").unwrap();
    let text = serialize([(&a, Some(&b"1"[..])), (&b, None), (&a, Some(&b"2"[..]))]).unwrap();
    assert_eq!(
        String::from_utf8(text).unwrap(),
        "[a]\n\tk = 1\n\tk = 2\n[b \"x\"]\n\tk\n"
    );
}

#[test]
fn key_names_outside_git_syntax_make_no_key() {
    assert!(KeyRef::new("", None, "k").is_none());
    assert!(KeyRef::new("a.b", None, "k").is_none());
    assert!(KeyRef::new("a", None, "1k").is_none());
    assert!(KeyRef::new("a", Some(b"x\ny"), "k").is_none());
    assert_eq!(
        KeyRef::new("Remote", Some(b"O"), "URL")
            .unwrap()
            .to_string(),
        "remote.O.url"
    );
}

mod roundtrip {
    use super::*;
    use proptest::prelude::*;

    fn name() -> impl Strategy<Value = String> {
        "[A-Za-z][A-Za-z0-9-]{0,8}"
    }

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        // Bias towards the bytes git's format treats specially.
        let special = prop::sample::select(vec![
            b' ', b'\t', b'\n', b'\r', b'"', b'\\', b'#', b';', b'[', b']', b'=', 0x08, b'a', 0xff,
        ]);
        prop::collection::vec(prop_oneof![special, 1u8..=255], 0..16)
    }

    fn setting() -> impl Strategy<Value = (KeyRef, Value)> {
        (
            "[A-Za-z0-9-]{1,8}",
            prop::option::of(
                bytes().prop_map(|b| b.into_iter().filter(|&c| c != b'\n').collect::<Vec<u8>>()),
            ),
            name(),
            prop::option::of(bytes()),
        )
            .prop_map(|(section, sub, name, value)| {
                (KeyRef::new(&section, sub.as_deref(), &name).unwrap(), value)
            })
    }

    proptest! {
        // No regressions file (it would land outside this module): a failure prints its
        // minimal input, which belongs in a named test above.
        #![proptest_config(ProptestConfig {
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn serialize_then_parse_gives_back_every_value(
            settings in prop::collection::vec(setting(), 0..12)
        ) {
            let text = serialize(settings.iter().map(|(k, v)| (k, v.as_deref()))).unwrap();
            let parsed = parse(&text).unwrap();
            // Serializing groups by section; per key the order is what git sees.
            let mut want: Vec<(KeyRef, Value)> = settings.clone();
            let mut got: Vec<(KeyRef, Value)> =
                parsed.entries.into_iter().map(|e| (e.key, e.value)).collect();
            want.sort_by(|a, b| a.0.cmp(&b.0));
            got.sort_by(|a, b| a.0.cmp(&b.0));
            prop_assert_eq!(got, want);
        }

        #[test]
        fn serializing_a_parsed_serialization_is_a_fixed_point(
            settings in prop::collection::vec(setting(), 0..12)
        ) {
            let text = serialize(settings.iter().map(|(k, v)| (k, v.as_deref()))).unwrap();
            let parsed = parse(&text).unwrap();
            let again =
                serialize(parsed.entries.iter().map(|e| (&e.key, e.value.as_deref()))).unwrap();
            prop_assert_eq!(again, text);
        }

        #[test]
        fn the_parser_never_panics_on_arbitrary_bytes(
            src in prop::collection::vec(any::<u8>(), 0..200)
        ) {
            let _ = parse(&src);
        }
    }
}
