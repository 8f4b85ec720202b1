//! JSON Schema → grammar on the committed schemas (tests/fixtures/schemas): random constrained
//! walks over a synthetic vocabulary produce text that parses as JSON and validates against
//! the schema with the `jsonschema` crate (formats checked too).

mod common;

use common::{random_walk, synthetic_vocab};
use kestrel_sampling::{json_schema_to_gbnf, Grammar, GrammarMatcher, TokenTrie};
use serde_json::Value;

fn schemas() -> Vec<(String, Value)> {
    texts()
        .into_iter()
        .map(|(n, t)| (n, serde_json::from_str(&t).unwrap()))
        .collect()
}

/// (name, schema text), sorted by name.
fn texts() -> Vec<(String, String)> {
    let dir = format!("{}/tests/fixtures/schemas", env!("CARGO_MANIFEST_DIR"));
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "json").then(|| {
                (
                    p.file_stem().unwrap().to_string_lossy().into_owned(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The schema's grammar and a validator for it (formats checked).
fn compiled(text: &str) -> (Grammar, jsonschema::Validator) {
    let schema: Value = serde_json::from_str(text).unwrap();
    let grammar = Grammar::from_json_schema_str(text).unwrap();
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap();
    (grammar, validator)
}

/// `doc` parses as JSON and validates; `what` names it in the failure.
fn assert_valid(validator: &jsonschema::Validator, doc: &str, what: &str) {
    let value: Value =
        serde_json::from_str(doc).unwrap_or_else(|e| panic!("{what}: {doc:?} is not JSON: {e}"));
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{what}: {doc}\ninvalid: {errors:?}");
}

#[test]
fn at_least_ten_schemas_compile() {
    let all = schemas();
    assert!(all.len() >= 10, "{} schemas", all.len());
    for (name, s) in &all {
        let gbnf = json_schema_to_gbnf(s).unwrap_or_else(|e| panic!("{name}: {e}"));
        Grammar::from_gbnf(&gbnf).unwrap_or_else(|e| panic!("{name}: {e}\n{gbnf}"));
    }
}

#[test]
fn constrained_walks_validate_against_their_schema() {
    let (vocab, eog) = synthetic_vocab();
    let trie = TokenTrie::new(&vocab, &[eog]);
    for (name, text) in texts() {
        let (g, validator) = compiled(&text);
        let mut completed = 0;
        let walks = 40;
        for seed in 0..walks {
            let w = random_walk(&g, &trie, seed * 104_729 + 17, 1500);
            if !w.completed {
                continue;
            }
            completed += 1;
            let text = String::from_utf8(w.bytes)
                .unwrap_or_else(|e| panic!("{name} walk {seed}: not UTF-8: {e}"));
            assert_valid(&validator, &text, &format!("{name} walk {seed}"));
            // and the grammar accepts it re-fed whole
            let mut m = GrammarMatcher::new(&g);
            m.accept_str(&text).unwrap();
            assert!(m.is_complete());
        }
        assert!(
            completed * 2 >= walks,
            "{name}: only {completed}/{walks} walks completed"
        );
    }
}

#[test]
fn known_valid_documents_are_accepted() {
    let cases = [
        (
            "person",
            r#"{"name": "Ada", "age": 36, "role": "admin", "address": {"city": "London", "zip": "12345-6789"}}"#,
        ),
        (
            "order",
            r#"{"order_id": "123e4567-e89b-12d3-a456-426614174000", "items": [{"sku": "ABC-123", "quantity": 2, "price": 9.5}], "paid": true, "note": null}"#,
        ),
        (
            "tree",
            r#"{"value": 1, "children": [{"value": 2}, {"value": 3, "children": []}]}"#,
        ),
        (
            "shapes",
            r#"{"shapes": [{"kind": "circle", "radius": 0.5}, {"kind": "rect", "w": 2, "h": 3}]}"#,
        ),
        (
            "inventory",
            r#"{"warehouse": "east-1", "stock": {"bolts": 10, "nuts": 0}, "location": [1.5, -2]}"#,
        ),
        (
            "event",
            r#"{"id": "00000000-0000-0000-0000-000000000000", "day": "2024-02-28", "starts": "09:30:00Z", "created": "2024-01-15T12:30:00.123+01:00"}"#,
        ),
    ];
    let all = texts();
    for (name, doc) in cases {
        let text = &all.iter().find(|(n, _)| n == name).unwrap().1;
        let schema: Value = serde_json::from_str(text).unwrap();
        assert!(
            jsonschema::is_valid(&schema, &serde_json::from_str(doc).unwrap()),
            "{name}: fixture doc invalid"
        );
        // written order: the documents list properties as the schemas declare them
        let g = Grammar::from_json_schema_str(text).unwrap();
        let mut m = GrammarMatcher::new(&g);
        m.accept_str(doc)
            .unwrap_or_else(|e| panic!("{name}: {e}\n{}", g.source()));
        assert!(m.is_complete(), "{name}");
    }
}

#[test]
fn value_and_text_entry_points_differ_only_in_property_order() {
    let text = r#"{"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "integer"}}, "required": ["zeta", "alpha"]}"#;
    let by_text = Grammar::from_json_schema_str(text).unwrap();
    let by_value = Grammar::from_json_schema(&serde_json::from_str(text).unwrap()).unwrap();
    let accepts = |g: &Grammar, s: &str| {
        let mut m = GrammarMatcher::new(g);
        m.accept_str(s).is_ok() && m.is_complete()
    };
    assert!(accepts(&by_text, r#"{"zeta": 1, "alpha": 2}"#));
    // serde_json's Map (without preserve_order) sorts keys
    let sorted = serde_json::from_str::<Value>(text).unwrap()["properties"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let doc = if sorted == "alpha" {
        r#"{"alpha": 2, "zeta": 1}"#
    } else {
        r#"{"zeta": 1, "alpha": 2}"#
    };
    assert!(accepts(&by_value, doc));
}

#[test]
fn mask_matches_direct_acceptance_in_length_bounded_strings() {
    use kestrel_sampling::TokenMask;
    let (vocab, eog) = common::big_vocab::synthetic_vocab(40_000);
    let trie = TokenTrie::new(&vocab, &[eog]);
    let mut mask = TokenMask::new(vocab.len());
    let text = &texts().into_iter().find(|(n, _)| n == "person").unwrap().1;
    let g = Grammar::from_json_schema_str(text).unwrap();
    let long = "x".repeat(36);
    let prefixes = [
        "{\"name\": \"".to_string(),
        "{\"name\": \"Ad".to_string(),
        format!("{{\"name\": \"{long}"),
        format!("{{\"name\": \"{long}abc"),
        "{\"name\": \"A\", \"age\": 3".to_string(),
        "{\"name\": \"A\", \"age\": 3, \"address\": {\"city\": \"ab".to_string(),
    ];
    for prefix in &prefixes {
        let mut m = GrammarMatcher::new(&g);
        m.accept_str(prefix).unwrap();
        m.fill_mask(&trie, &mut mask);
        for t in 0..vocab.len() as u32 {
            assert_eq!(
                mask.is_allowed(t),
                m.accepts_token(&trie, t),
                "after {prefix:?}: token {t} {:?}",
                String::from_utf8_lossy(&vocab[t as usize])
            );
        }
    }
}

/// Cut a constrained walk anywhere: the grammar's shortest completion appended to the cut
/// text gives a document that parses and validates (how the generator closes an output
/// whose token budget runs out).
#[test]
fn shortest_completion_closes_any_prefix_into_a_valid_document() {
    let (vocab, eog) = synthetic_vocab();
    let trie = TokenTrie::new(&vocab, &[eog]);
    for (name, text) in texts() {
        let (g, validator) = compiled(&text);
        for seed in 0..6u64 {
            let w = random_walk(&g, &trie, seed * 7_919 + 3, 300);
            for cut in (0..=w.bytes.len()).step_by(5) {
                let prefix = &w.bytes[..cut];
                let mut m = GrammarMatcher::new(&g);
                if m.accept_bytes(prefix).is_err() {
                    continue; // not on a token boundary inside a character
                }
                let tail = m
                    .shortest_completion(256)
                    .unwrap_or_else(|| panic!("{name}: no completion after {prefix:?}"));
                let mut doc = prefix.to_vec();
                doc.extend_from_slice(&tail);
                assert_eq!(m.completion_len(), Some(tail.len()), "{name}");
                m.accept_bytes(&tail).unwrap();
                assert!(m.is_complete(), "{name}: completion does not complete");
                let doc = String::from_utf8(doc).unwrap();
                assert_valid(&validator, &doc, &format!("{name} cut at {cut}"));
            }
        }
    }
}
