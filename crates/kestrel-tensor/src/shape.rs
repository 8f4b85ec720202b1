//! `Shape`: up to 4 dims in ggml order (`dims()[0]` is the row length, the fastest-varying
//! dim), with checked element and row counts.

use std::fmt;

use crate::error::{Result, TensorError};

/// Most dims a shape can have (as ggml).
pub const MAX_DIMS: usize = 4;

/// A tensor shape in ggml order: `dims()[0]` elements per row, and the product of the other
/// dims rows. A 2-D weight `W[m×k]` (m output rows of k inputs) is `Shape::new(&[k, m])`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    dims: [usize; MAX_DIMS],
    rank: u8,
}

impl Shape {
    /// A shape from dims in ggml order. Errors for zero or more than [`MAX_DIMS`] dims, or an
    /// element count that overflows `usize`. Zero-sized dims are allowed.
    pub fn new(dims: &[usize]) -> Result<Shape> {
        if dims.is_empty() || dims.len() > MAX_DIMS {
            return Err(TensorError::InvalidShape {
                dims: dims.to_vec(),
                why: "a shape has 1 to 4 dims",
            });
        }
        let mut count: usize = 1;
        for &d in dims {
            count = count
                .checked_mul(d)
                .ok_or_else(|| TensorError::InvalidShape {
                    dims: dims.to_vec(),
                    why: "element count overflows",
                })?;
        }
        let mut a = [1usize; MAX_DIMS];
        a[..dims.len()].copy_from_slice(dims);
        Ok(Shape {
            dims: a,
            rank: dims.len() as u8,
        })
    }

    /// A 1-D shape of `n` elements.
    pub fn vector(n: usize) -> Shape {
        Shape {
            dims: [n, 1, 1, 1],
            rank: 1,
        }
    }

    /// A 2-D shape: `rows` rows of `row_len` elements.
    pub fn matrix(rows: usize, row_len: usize) -> Result<Shape> {
        Shape::new(&[row_len, rows])
    }

    /// The dims, in ggml order.
    pub fn dims(&self) -> &[usize] {
        &self.dims[..self.rank as usize]
    }

    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    /// Dim `i`, or 1 past the rank (as ggml's `ne[i]`).
    pub fn dim(&self, i: usize) -> usize {
        self.dims.get(i).copied().unwrap_or(1)
    }

    /// Elements per row (`dims()[0]`).
    pub fn row_len(&self) -> usize {
        self.dims[0]
    }

    /// Number of rows: the product of all dims but the first.
    pub fn n_rows(&self) -> usize {
        // Cannot overflow: `new` checked the full product.
        self.dims[1] * self.dims[2] * self.dims[3]
    }

    /// Number of elements.
    pub fn elem_count(&self) -> usize {
        self.row_len() * self.n_rows()
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.dims().iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_count_and_refuse_bad_dims() {
        let s = Shape::new(&[64, 8, 3]).unwrap();
        assert_eq!((s.row_len(), s.n_rows(), s.elem_count()), (64, 24, 1536));
        assert_eq!(s.dims(), &[64, 8, 3]);
        assert_eq!(s.dim(3), 1);
        assert_eq!(s.to_string(), "[64, 8, 3]");
        assert!(Shape::new(&[]).is_err());
        assert!(Shape::new(&[1, 2, 3, 4, 5]).is_err());
        assert!(Shape::new(&[usize::MAX, 2]).is_err());
        assert_eq!(Shape::matrix(3, 5).unwrap().dims(), &[5, 3]);
        assert_eq!(Shape::new(&[0, 4]).unwrap().elem_count(), 0);
    }
}
