use super::*;

fn all_frames() -> Vec<Frame> {
    vec![
        Frame::Hello {
            version: VERSION,
            listen: "127.0.0.1:3128".into(),
        },
        Frame::Open {
            stream: 7,
            peer: "127.0.0.1:40000".into(),
        },
        Frame::Data {
            stream: 7,
            data: b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        },
        Frame::Eof { stream: 7 },
        Frame::Close { stream: u32::MAX },
        Frame::Credit {
            stream: 7,
            bytes: 65536,
        },
        Frame::Refused {
            peer: "127.0.0.1:40000".into(),
        },
        Frame::Fatal {
            message: "cannot listen".into(),
        },
        Frame::Connect {
            stream: HOST_STREAM | 1,
            port: 8080,
        },
        Frame::Accepted {
            stream: HOST_STREAM | 1,
        },
    ]
}

#[test]
fn each_side_opens_streams_only_in_its_own_half_of_the_ids() {
    let open_in_the_shims_half = Frame::Open {
        stream: HOST_STREAM | 7,
        peer: "127.0.0.1:40000".into(),
    };
    assert!(decode(&open_in_the_shims_half.to_bytes()).is_err());
    for f in [
        Frame::Connect {
            stream: 7,
            port: 80,
        },
        Frame::Accepted { stream: 7 },
    ] {
        assert!(decode(&f.to_bytes()).is_err(), "{f:?}");
    }
}

#[test]
fn a_connect_names_one_real_port() {
    let zero = Frame::Connect {
        stream: HOST_STREAM | 1,
        port: 0,
    };
    assert!(decode(&zero.to_bytes()).is_err());
    // Three payload bytes: not a port.
    let mut wire = vec![9u8];
    wire.extend_from_slice(&(HOST_STREAM | 1).to_be_bytes());
    wire.extend_from_slice(&3u32.to_be_bytes());
    wire.extend_from_slice(&[0, 80, 0]);
    assert!(decode(&wire).is_err());
}

#[test]
fn every_frame_round_trips_through_decode_and_read_frame() {
    let mut wire = Vec::new();
    for f in all_frames() {
        f.encode(&mut wire);
    }
    let mut at = 0;
    let mut decoded = Vec::new();
    while let Some((f, used)) = decode(&wire[at..]).unwrap() {
        decoded.push(f);
        at += used;
    }
    assert_eq!(at, wire.len());
    assert_eq!(decoded, all_frames());

    let mut r = wire.as_slice();
    let mut read = Vec::new();
    while let Some(f) = read_frame(&mut r).unwrap() {
        read.push(f);
    }
    assert_eq!(read, all_frames());
}

#[test]
fn a_frame_split_at_every_byte_decodes_only_when_whole() {
    let wire = Frame::Data {
        stream: 3,
        data: vec![1, 2, 3, 4],
    }
    .to_bytes();
    for cut in 0..wire.len() {
        assert_eq!(decode(&wire[..cut]).unwrap(), None, "cut at {cut}");
    }
    assert!(decode(&wire).unwrap().is_some());
}

#[test]
fn data_header_matches_encode() {
    let mut buf = vec![0u8; HEADER_LEN + 3];
    buf[HEADER_LEN..].copy_from_slice(b"abc");
    data_header(&mut buf, 9, 3);
    assert_eq!(
        buf,
        Frame::Data {
            stream: 9,
            data: b"abc".to_vec()
        }
        .to_bytes()
    );
}

#[test]
fn malformed_frames_are_errors_not_guesses() {
    let cases: Vec<(&str, Vec<u8>, DecodeError)> = vec![
        (
            "unknown type",
            vec![99, 0, 0, 0, 1, 0, 0, 0, 0],
            DecodeError::UnknownType(99),
        ),
        (
            "oversized data",
            vec![3, 0, 0, 0, 1, 0, 1, 0, 1],
            DecodeError::TooLong {
                kind: 3,
                len: 65537,
            },
        ),
        (
            "eof with payload",
            vec![4, 0, 0, 0, 1, 0, 0, 0, 1, 0],
            DecodeError::TooLong { kind: 4, len: 1 },
        ),
        (
            "hello without magic",
            [vec![1, 0, 0, 0, 0, 0, 0, 0, 6], b"XXXX\0\x01".to_vec()].concat(),
            DecodeError::BadHello("no GVHF magic"),
        ),
        (
            "data on the session stream",
            vec![3, 0, 0, 0, 0, 0, 0, 0, 1, 42],
            DecodeError::BadPayload {
                kind: 3,
                reason: "stream 0 is the session",
            },
        ),
        (
            "empty data",
            vec![3, 0, 0, 0, 1, 0, 0, 0, 0],
            DecodeError::BadPayload {
                kind: 3,
                reason: "empty DATA",
            },
        ),
        (
            "short credit",
            vec![6, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0],
            DecodeError::BadPayload {
                kind: 6,
                reason: "CREDIT carries 4 bytes",
            },
        ),
    ];
    for (name, bytes, want) in cases {
        assert_eq!(decode(&bytes).unwrap_err(), want, "{name}");
    }
}

#[test]
fn read_frame_reports_a_truncated_frame() {
    let wire = Frame::Data {
        stream: 1,
        data: vec![0; 10],
    }
    .to_bytes();
    let e = read_frame(&mut &wire[..12]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    let e = read_frame(&mut &wire[..4]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
}

#[test]
fn receiver_window_refuses_an_overrun_and_batches_credit() {
    let mut w = RecvWindow::default();
    w.receive(INITIAL_WINDOW as usize).unwrap();
    assert!(w.receive(1).is_err(), "one byte past the window");
    // Consuming a little while busy sends nothing yet; idle flushes it.
    assert_eq!(w.consume(10, false), None);
    assert_eq!(w.consume(10, true), Some(20));
    w.receive(20).unwrap();
    assert!(w.receive(1).is_err());
    assert_eq!(
        w.consume(INITIAL_WINDOW as usize / 4, false),
        Some(INITIAL_WINDOW / 4)
    );
}
