//! `--override-kv KEY=TYPE:VALUE`: metadata llama-quantize sets in its output, parsed as
//! llama.cpp's `string_parse_kv_override` parses it (`int`, `float`, `bool`, `str`) and written
//! as `llama_model_quantize` writes it (an `int` as the u32 of its absolute value, a `float` as
//! f32), each key taken out of its place and set again at the end.

use crate::MetadataValue;

use super::QuantizeError;

/// One metadata override.
#[derive(Clone, Debug, PartialEq)]
pub struct KvOverride {
    /// The key.
    pub key: String,
    /// The value written.
    pub value: MetadataValue,
}

impl KvOverride {
    /// Parses `KEY=TYPE:VALUE` (`TYPE` one of `int`, `float`, `bool`, `str`).
    ///
    /// # Errors
    /// No `=`, an empty key or one of 128 bytes or more, an unknown type, a value that is not
    /// of its type (an `int` whose absolute value does not fit 32 bits, a `bool` other than
    /// `true`/`false`, a `str` over 127 bytes). llama.cpp reads numbers leniently (`atol`,
    /// `atof`: `12abc` is 12, `abc` is 0); kestrel refuses what is not a number.
    pub fn parse(arg: &str) -> Result<KvOverride, QuantizeError> {
        let bad = |why: &str| QuantizeError::Refused(format!("--override-kv {arg:?}: {why}"));
        let (key, rest) = arg
            .split_once('=')
            .ok_or_else(|| bad("expected KEY=TYPE:VALUE"))?;
        if key.is_empty() || key.len() >= 128 {
            return Err(bad("the key must be 1 to 127 bytes"));
        }
        let (ty, v) = rest
            .split_once(':')
            .ok_or_else(|| bad("expected TYPE:VALUE after ="))?;
        let value = match ty {
            "int" => {
                let n: i64 = v.trim().parse().map_err(|_| bad("not an integer"))?;
                let n = u32::try_from(n.unsigned_abs())
                    .map_err(|_| bad("llama.cpp writes an int as a u32; this one does not fit"))?;
                MetadataValue::U32(n)
            }
            "float" => {
                let x: f64 = v.trim().parse().map_err(|_| bad("not a number"))?;
                MetadataValue::F32(x as f32)
            }
            "bool" => match v {
                "true" => MetadataValue::Bool(true),
                "false" => MetadataValue::Bool(false),
                _ => return Err(bad("a bool is true or false")),
            },
            "str" => {
                if v.len() > 127 {
                    return Err(bad("a str value is at most 127 bytes"));
                }
                MetadataValue::String(v.to_string())
            }
            _ => return Err(bad("the type is int, float, bool or str")),
        };
        Ok(KvOverride {
            key: key.to_string(),
            value,
        })
    }
}

/// Sets `key` to `value` as `gguf_set_val_*` does: out of its place, in again at the end.
pub(super) fn set_last(md: &mut Vec<(String, MetadataValue)>, key: &str, value: MetadataValue) {
    md.retain(|(k, _)| k != key);
    md.push((key.to_string(), value));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_parse_as_llama_cpp_writes_them() {
        let p = |s| KvOverride::parse(s).unwrap().value;
        assert_eq!(p("a.b=int:-7"), MetadataValue::U32(7));
        assert_eq!(p("a.b=float:0.25"), MetadataValue::F32(0.25));
        assert_eq!(p("a.b=bool:false"), MetadataValue::Bool(false));
        assert_eq!(p("a.b=str:x=y:z"), MetadataValue::String("x=y:z".into()));
        for bad in [
            "a.b",
            "=int:1",
            "a.b=int",
            "a.b=i32:1",
            "a.b=int:1x",
            "a.b=int:5000000000",
            "a.b=bool:yes",
        ] {
            assert!(KvOverride::parse(bad).is_err(), "{bad}");
        }
        assert!(KvOverride::parse(&format!("a=str:{}", "x".repeat(128))).is_err());
        let mut md = vec![
            ("x".to_string(), MetadataValue::U32(1)),
            ("y".to_string(), MetadataValue::U32(2)),
        ];
        set_last(&mut md, "x", MetadataValue::U32(3));
        assert_eq!(md[0].0, "y");
        assert_eq!(md[1], ("x".to_string(), MetadataValue::U32(3)));
    }
}
