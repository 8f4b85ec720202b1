//! The legacy `.dat` importance matrix (`llama-imatrix` before b5900, `--output-format dat`
//! since; many published imatrix files are in it), read as llama.cpp's
//! `common_imatrix_load_legacy` reads it: an `i32` entry count, then per entry an `i32` name
//! length, the name, an `i32` call count and an `i32` value count followed by that many `f32`
//! values (already divided by the calls' counts and multiplied by the calls); then, optionally,
//! the `i32` chunk count and an `i32`-length dataset name. All little-endian.

/// One matrix's entry.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct LegacyEntry {
    /// The tensor name (up to its first NUL, as llama.cpp reads it into a C string).
    pub name: String,
    /// Calls the values were collected over (`ncall`).
    pub ncall: i32,
    /// The values.
    pub values: Vec<f32>,
}

/// A legacy file's contents.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Legacy {
    /// Entries in file order (a repeated name: the later one wins, as in llama.cpp's map).
    pub entries: Vec<LegacyEntry>,
    /// The chunk count of the optional trailer (0 without it).
    pub chunk_count: i32,
    /// The dataset name of the optional trailer.
    pub dataset: Option<String>,
}

/// Reads and parses the legacy file at `path` (errors name it).
pub(super) fn read(path: &std::path::Path) -> Result<Legacy, crate::quantize::QuantizeError> {
    let bad = |why: String| {
        crate::quantize::QuantizeError::Refused(format!(
            "importance matrix {} (not GGUF, read as the legacy .dat format): {why}",
            path.display()
        ))
    };
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    parse(&bytes).map_err(bad)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len())?;
        let s = &self.b[self.at..end];
        self.at = end;
        Some(s)
    }

    fn i32(&mut self) -> Option<i32> {
        self.take(4)
            .map(|s| i32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
}

/// Parses a legacy file (errors say what and at which entry). Every size is checked against the
/// bytes left, so a corrupt count cannot ask for more memory than the file holds.
pub(super) fn parse(bytes: &[u8]) -> Result<Legacy, String> {
    let mut r = Reader { b: bytes, at: 0 };
    let n = r.i32().filter(|&n| n >= 1).ok_or("no entries")?;
    let mut out = Legacy::default();
    for i in 1..=n {
        let len = r.i32().ok_or(format!("entry {i}: no name length"))?;
        let name = usize::try_from(len)
            .ok()
            .and_then(|len| r.take(len))
            .ok_or(format!("entry {i}: a name of {len} bytes"))?;
        let name = name.split(|&c| c == 0).next().unwrap_or_default();
        let name = String::from_utf8_lossy(name).into_owned();
        let ncall = r
            .i32()
            .ok_or(format!("entry {i} ({name}): no call count"))?;
        let nval = r
            .i32()
            .ok_or(format!("entry {i} ({name}): no value count"))?;
        let values = usize::try_from(nval)
            .ok()
            .filter(|&v| v >= 1)
            .and_then(|v| r.take(v.checked_mul(4)?))
            .ok_or(format!("entry {i} ({name}): {nval} values"))?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        out.entries.push(LegacyEntry {
            name,
            ncall,
            values,
        });
    }
    // The trailer: each part only where the bytes for it are there.
    if r.at < bytes.len() {
        out.chunk_count = r.i32().unwrap_or(0);
        if let Some(len) = r.i32().filter(|&l| l > 0) {
            if let Some(d) = r.take(len as usize) {
                let d = d.split(|&c| c == 0).next().unwrap_or_default();
                out.dataset = Some(String::from_utf8_lossy(d).into_owned());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(entries: &[(&str, i32, &[f32])], trailer: Option<(i32, &str)>) -> Vec<u8> {
        let mut b = (entries.len() as i32).to_le_bytes().to_vec();
        for (name, ncall, v) in entries {
            b.extend((name.len() as i32).to_le_bytes());
            b.extend(name.as_bytes());
            b.extend(ncall.to_le_bytes());
            b.extend((v.len() as i32).to_le_bytes());
            for x in *v {
                b.extend(x.to_le_bytes());
            }
        }
        if let Some((chunks, d)) = trailer {
            b.extend(chunks.to_le_bytes());
            b.extend((d.len() as i32).to_le_bytes());
            b.extend(d.as_bytes());
        }
        b
    }

    #[test]
    fn entries_and_trailer_read_back() {
        let b = file(
            &[
                ("blk.0.attn_q.weight", 10, &[1.0, 2.5]),
                ("output.weight", 3, &[4.0]),
            ],
            Some((7, "wiki.txt")),
        );
        let l = parse(&b).unwrap();
        assert_eq!(l.entries.len(), 2);
        assert_eq!(l.entries[0].name, "blk.0.attn_q.weight");
        assert_eq!(
            (l.entries[0].ncall, l.entries[0].values.clone()),
            (10, vec![1.0, 2.5])
        );
        assert_eq!((l.chunk_count, l.dataset.as_deref()), (7, Some("wiki.txt")));
        // Without the trailer: no chunks, no dataset.
        let l = parse(&file(&[("a", 1, &[1.0])], None)).unwrap();
        assert_eq!((l.chunk_count, l.dataset), (0, None));
    }

    #[test]
    fn corrupt_files_are_errors_not_allocations() {
        let good = file(&[("a", 1, &[1.0, 2.0])], None);
        assert!(parse(&[]).is_err());
        assert!(parse(&0i32.to_le_bytes()).is_err());
        for cut in 1..good.len() {
            assert!(parse(&good[..cut]).is_err(), "cut at {cut}");
        }
        // A value count far past the file's end.
        let mut huge = good.clone();
        let at = 4 + 4 + 1 + 4;
        huge[at..at + 4].copy_from_slice(&i32::MAX.to_le_bytes());
        assert!(parse(&huge).unwrap_err().contains("values"));
        let mut neg = good;
        neg[4..8].copy_from_slice(&(-5i32).to_le_bytes());
        assert!(parse(&neg).unwrap_err().contains("name"));
    }
}
