//! `get_rows`: embedding lookup. Copies table rows selected by ids (token ids) into f32 rows,
//! dequantizing from any [`DType`] a block at a time; ids are bounds-checked.

use rayon::prelude::*;

use super::block::dispatch;
use crate::error::{Result, TensorError};
use crate::DType;

/// `out[i] = table[ids[i]]` as f32, for a table of `n_rows` rows of `row_len` elements of
/// `dtype` (raw little-endian bytes, any alignment). `out` holds `ids.len() * row_len` values.
///
/// Results are exact (the same values as the scalar dequantizers).
///
/// # Errors
/// `IdOutOfRange` for an id `>= n_rows` (nothing is written then), `PartialBlock` /
/// `LengthMismatch` for bad sizes.
pub fn get_rows(
    table: &[u8],
    dtype: DType,
    n_rows: usize,
    row_len: usize,
    ids: &[u32],
    out: &mut [f32],
) -> Result<()> {
    const OP: &str = "get_rows";
    let rb = dtype.row_bytes(row_len).ok_or(TensorError::PartialBlock {
        dtype,
        row_len,
        block_size: dtype.block_size(),
    })?;
    let want = rb.saturating_mul(n_rows);
    if table.len() != want {
        return Err(TensorError::LengthMismatch {
            op: OP,
            what: "table bytes",
            expected: want,
            actual: table.len(),
        });
    }
    check_ids(OP, ids, n_rows, row_len, out.len())?;
    if row_len == 0 {
        return Ok(());
    }
    dispatch!(dtype, K => {
        out.par_chunks_mut(row_len)
            .zip(ids.par_iter())
            .with_min_len(4)
            .for_each(|(o, &id)| {
                let id = id as usize;
                dequant_row_k::<K>(&table[id * rb..(id + 1) * rb], o);
            })
    });
    Ok(())
}

/// Checks that `out` holds `ids.len()` rows of `row_len` and that every id is below `n_rows`.
pub(crate) fn check_ids(
    op: &'static str,
    ids: &[u32],
    n_rows: usize,
    row_len: usize,
    out_len: usize,
) -> Result<()> {
    let want = ids.len().saturating_mul(row_len);
    if out_len != want {
        return Err(TensorError::LengthMismatch {
            op,
            what: "out",
            expected: want,
            actual: out_len,
        });
    }
    match ids
        .iter()
        .enumerate()
        .find(|(_, &id)| id as usize >= n_rows)
    {
        Some((index, &id)) => Err(TensorError::IdOutOfRange {
            op,
            index,
            id: i64::from(id),
            rows: n_rows,
        }),
        None => Ok(()),
    }
}

/// Dequantizes one row of `dtype` (its raw bytes `w`, whole blocks) into `out`.
pub(crate) fn dequant_row(dtype: DType, w: &[u8], out: &mut [f32]) {
    dispatch!(dtype, K => dequant_row_k::<K>(w, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{quantized_rows, Rng};

    #[test]
    fn rows_match_scalar_dequantization_for_every_dtype() {
        let mut rng = Rng::new(11);
        for dtype in DType::ALL {
            let (rows, k) = (7, 256);
            let (table, deq) = quantized_rows(&mut rng, dtype, rows, k);
            let ids = [3u32, 0, 6, 3];
            let mut out = vec![f32::NAN; ids.len() * k];
            get_rows(&table, dtype, rows, k, &ids, &mut out).unwrap();
            for (i, &id) in ids.iter().enumerate() {
                let id = id as usize;
                assert_eq!(
                    &out[i * k..(i + 1) * k],
                    &deq[id * k..(id + 1) * k],
                    "{dtype}"
                );
            }
        }
    }

    #[test]
    fn out_of_range_ids_are_errors() {
        let table = vec![0u8; 4 * 8 * 3];
        let mut out = vec![0f32; 16];
        assert!(get_rows(&table, DType::F32, 3, 8, &[2, 1], &mut out).is_ok());
        assert!(matches!(
            get_rows(&table, DType::F32, 3, 8, &[2, 3], &mut out),
            Err(TensorError::IdOutOfRange {
                index: 1,
                id: 3,
                rows: 3,
                ..
            })
        ));
        assert!(get_rows(&table, DType::F32, 3, 8, &[u32::MAX, 0], &mut out).is_err());
        assert!(get_rows(&table[1..], DType::F32, 3, 8, &[0, 0], &mut out).is_err());
        assert!(get_rows(&table, DType::F32, 3, 8, &[0], &mut out).is_err());
    }
}
