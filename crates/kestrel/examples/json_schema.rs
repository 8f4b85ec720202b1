//! Output constrained to a JSON Schema: `cargo run --release -p kestrel --example json_schema [MODEL]`.

use kestrel::{GenerateOptions, LoadOptions, Model};

fn main() -> Result<(), kestrel::Error> {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "smollm2-135m".into());
    let mut model = Model::load(&name, LoadOptions::default())?;
    let schema = r#"{"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3}
    }, "required": ["name", "age", "hobbies"]}"#;
    let opts = GenerateOptions::default()
        .with_seed(1)
        .with_max_tokens(96)
        .with_json_schema(schema)?;
    let out = model.generate("A person described as JSON: ", &opts)?;
    println!("{}", out.text);
    Ok(())
}
