//! Stop strings split at every byte position (one split, and every pair of splits), ASCII and
//! multi-byte UTF-8: the text before the stop string is emitted, the stop string never is, and
//! what was emitted at any step is a prefix of the final text (nothing is retracted).

use kestrel_sampling::StopMatcher;

const STOPS: &[&str] = &["</s>", "\n\nUser:", "ststop", "é…", "停止", "🦀x", "aa"];

fn feed(stops: &[&str], pieces: &[&[u8]]) -> (String, Option<usize>, Vec<String>) {
    let mut m = StopMatcher::new(stops.iter().copied());
    let mut out = String::new();
    let mut steps = Vec::new();
    for p in pieces {
        let s = m.push_bytes(p);
        out.push_str(&s.text);
        steps.push(out.clone());
        if s.stopped() {
            return (out, s.stop, steps);
        }
    }
    out.push_str(&m.finish());
    steps.push(out.clone());
    (out, None, steps)
}

fn assert_monotone(steps: &[String], expected: &str) {
    for s in steps {
        assert!(
            expected.starts_with(s.as_str()),
            "emitted {s:?}, not a prefix of {expected:?}"
        );
    }
}

#[test]
fn every_single_split_of_every_stop_string() {
    for (i, stop) in STOPS.iter().enumerate() {
        let before = "Héllo, w";
        let text = format!("{before}{stop} after it");
        let b = text.as_bytes();
        for cut in 0..=b.len() {
            let (out, hit, steps) = feed(&[stop], &[&b[..cut], &b[cut..]]);
            assert_eq!(out, before, "stop {i} {stop:?} cut {cut}");
            assert_eq!(hit, Some(0));
            assert_monotone(&steps, before);
        }
    }
}

#[test]
fn every_pair_of_splits_with_all_stops_active() {
    for stop in STOPS {
        let before = "a s st sts 語";
        let text = format!("{before}{stop}tail");
        let b = text.as_bytes();
        let expected_idx = STOPS.iter().position(|s| s == stop).unwrap();
        for c1 in 0..=b.len() {
            for c2 in c1..=b.len() {
                let (out, hit, steps) = feed(STOPS, &[&b[..c1], &b[c1..c2], &b[c2..]]);
                assert_eq!(out, before, "{stop:?} cuts {c1},{c2}");
                assert_eq!(hit, Some(expected_idx));
                assert_monotone(&steps, before);
            }
        }
    }
}

#[test]
fn byte_at_a_time_never_splits_a_character() {
    for stop in STOPS {
        let before = "ü→🦀 ";
        let text = format!("{before}{stop}");
        let pieces: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
        let mut m = StopMatcher::new([*stop]);
        let mut out = String::new();
        for p in pieces {
            let s = m.push_bytes(p);
            // every emitted chunk is whole characters (it is a String) and a prefix of `before`
            out.push_str(&s.text);
            assert!(before.starts_with(&out));
            if s.stopped() {
                break;
            }
        }
        assert_eq!(out, before);
    }
}

#[test]
fn text_without_a_stop_is_emitted_whole_at_every_split() {
    // near misses: prefixes of the stop strings that never complete
    let text = "</ </s <\n\nUser ststo é 停 🦀y a";
    let b = text.as_bytes();
    for cut in 0..=b.len() {
        for cut2 in cut..=b.len() {
            let (out, hit, steps) = feed(
                &["</s>", "\n\nUser:", "ststop", "é…", "停止", "🦀x", "aa"],
                &[&b[..cut], &b[cut..cut2], &b[cut2..]],
            );
            assert_eq!(hit, None);
            assert_eq!(out, text);
            assert_monotone(&steps, text);
        }
    }
}

#[test]
fn held_text_is_released_as_soon_as_it_cannot_be_a_stop() {
    let mut m = StopMatcher::new(["</s>"]);
    assert_eq!(m.push("x</").text, "x");
    assert_eq!(m.push("t").text, "</t");
    assert_eq!(m.held(), "");
}
