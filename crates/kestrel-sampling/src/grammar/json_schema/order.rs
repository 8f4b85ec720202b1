//! Property order as written in schema text (serde_json's `Map` sorts keys unless its
//! `preserve_order` feature is on; llama.cpp keeps the written order).

use super::*;

/// A JSON value that remembers object key order (serde_json's `Map` sorts keys unless the
/// `preserve_order` feature is on), used only to read property order from schema text.
pub(super) enum Ordered {
    Obj(Vec<(String, Ordered)>),
    Arr(Vec<Ordered>),
    Leaf,
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Ordered, E> {
                Ok(Ordered::Leaf)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Ordered, E> {
                Ok(Ordered::Leaf)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Ordered, E> {
                Ok(Ordered::Leaf)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Ordered, E> {
                Ok(Ordered::Leaf)
            }
            fn visit_str<E>(self, _: &str) -> Result<Ordered, E> {
                Ok(Ordered::Leaf)
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Leaf)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Ordered, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element()? {
                    v.push(x);
                }
                Ok(Ordered::Arr(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Ordered, A::Error> {
                let mut v = Vec::new();
                while let Some((k, x)) = a.next_entry::<String, Ordered>()? {
                    v.push((k, x));
                }
                Ok(Ordered::Obj(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Key order of every object in the schema text, by JSON pointer.
pub(super) fn key_orders(o: &Ordered, ptr: &mut String, out: &mut HashMap<String, Vec<String>>) {
    match o {
        Ordered::Obj(kv) => {
            out.insert(ptr.clone(), kv.iter().map(|(k, _)| k.clone()).collect());
            for (k, v) in kv {
                let len = ptr.len();
                ptr.push('/');
                ptr.push_str(&escape_pointer(k));
                key_orders(v, ptr, out);
                ptr.truncate(len);
            }
        }
        Ordered::Arr(items) => {
            for (i, v) in items.iter().enumerate() {
                let len = ptr.len();
                ptr.push_str(&format!("/{i}"));
                key_orders(v, ptr, out);
                ptr.truncate(len);
            }
        }
        Ordered::Leaf => {}
    }
}
