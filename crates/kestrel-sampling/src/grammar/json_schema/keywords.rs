//! Reading keyword values: counts, numbers and integer or number bounds, properties and
//! `required`, `$ref` resolution.

use super::*;

impl Converter<'_> {
    pub(super) fn uint(
        obj: &Map<String, Value>,
        key: &str,
        ptr: &str,
    ) -> Result<Option<u64>, SamplingError> {
        match obj.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .or_else(|| {
                    v.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                        .map(|f| f as u64)
                })
                .map(Some)
                .ok_or_else(|| invalid(ptr, format!("`{key}` must be a non-negative integer"))),
        }
    }

    pub(super) fn num(
        obj: &Map<String, Value>,
        key: &str,
        ptr: &str,
    ) -> Result<Option<f64>, SamplingError> {
        match obj.get(key) {
            None => Ok(None),
            Some(v) => {
                let f = v
                    .as_f64()
                    .ok_or_else(|| invalid(ptr, format!("`{key}` must be a number")))?;
                if !f.is_finite() || f.abs() > MAX_BOUND {
                    return Err(unsupported(format!("{key} beyond ±9e15"), ptr));
                }
                Ok(Some(f))
            }
        }
    }

    /// Integer bounds: `[lo, hi]`, from inclusive and exclusive keywords (the tighter wins).
    pub(super) fn int_bounds(
        &self,
        obj: &Map<String, Value>,
        ptr: &str,
    ) -> Result<(Option<i64>, Option<i64>), SamplingError> {
        let mut lo: Option<i64> = None;
        let mut hi: Option<i64> = None;
        if let Some(v) = Self::num(obj, "minimum", ptr)? {
            lo = Some(v.ceil() as i64);
        }
        if let Some(v) = Self::num(obj, "exclusiveMinimum", ptr)? {
            let b = v.floor() as i64 + 1;
            lo = Some(lo.map_or(b, |l| l.max(b)));
        }
        if let Some(v) = Self::num(obj, "maximum", ptr)? {
            hi = Some(v.floor() as i64);
        }
        if let Some(v) = Self::num(obj, "exclusiveMaximum", ptr)? {
            let b = v.ceil() as i64 - 1;
            hi = Some(hi.map_or(b, |h| h.min(b)));
        }
        if let (Some(l), Some(h)) = (lo, hi) {
            if l > h {
                return Err(invalid(ptr, "no integer lies between the bounds"));
            }
        }
        Ok((lo, hi))
    }

    /// Numbers within bounds: integers in range, and `k.ddd` where the whole interval
    /// `[k, k+1)` (or `(-(k+1), -k]`) lies inside the bounds.
    pub(super) fn number_range(
        &mut self,
        obj: &Map<String, Value>,
        ptr: &str,
    ) -> Result<String, SamplingError> {
        let lo_incl = Self::num(obj, "minimum", ptr)?;
        let lo_excl = Self::num(obj, "exclusiveMinimum", ptr)?;
        let hi_incl = Self::num(obj, "maximum", ptr)?;
        let hi_excl = Self::num(obj, "exclusiveMaximum", ptr)?;
        let (int_lo, int_hi) = self.int_bounds(obj, ptr).unwrap_or((Some(1), Some(0)));
        let lo = match (lo_incl, lo_excl) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let hi = match (hi_incl, hi_excl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.add_primitive("decimal-nz", "decimal-nz");
        let mut alts = Vec::new();
        if !matches!((int_lo, int_hi), (Some(l), Some(h)) if l > h) {
            let mut out = String::new();
            build_min_max_int(int_lo, int_hi, &mut out, 16, true);
            alts.push(format!("({out})"));
        }
        // k.ddd (ddd not all zeros) lies in (k, k+1): fine when k >= lo and k + 1 <= hi
        let k_lo = lo.map_or(0, |l| l.ceil() as i64).max(0);
        let k_hi = hi.map(|h| h.floor() as i64 - 1);
        if k_hi.is_none_or(|h| h >= k_lo) {
            let mut out = String::new();
            build_min_max_int(Some(k_lo), k_hi, &mut out, 16, true);
            alts.push(format!("({out}) \".\" decimal-nz"));
        }
        // -m.ddd lies in (-(m+1), -m): fine when -(m+1) >= lo and -m <= hi
        let m_lo = hi.map_or(0, |h| (-h).ceil() as i64).max(0);
        let m_hi = lo.map(|l| (-l).floor() as i64 - 1);
        if m_hi.is_none_or(|h| h >= m_lo) {
            let mut out = String::new();
            build_min_max_int(Some(m_lo), m_hi, &mut out, 16, true);
            alts.push(format!("\"-\" ({out}) \".\" decimal-nz"));
        }
        if alts.is_empty() {
            return Err(invalid(
                ptr,
                "no number the grammar can write lies between the bounds",
            ));
        }
        Ok(format!("({}) space", alts.join(" | ")))
    }

    pub(super) fn properties_of(
        &self,
        obj: &Map<String, Value>,
        ptr: &str,
    ) -> Result<Vec<(String, Value)>, SamplingError> {
        match obj.get("properties") {
            None => Ok(Vec::new()),
            Some(Value::Object(p)) => Ok(p.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
            Some(_) => Err(invalid(ptr, "`properties` must be an object")),
        }
    }

    pub(super) fn required_of(
        obj: &Map<String, Value>,
        ptr: &str,
    ) -> Result<Vec<String>, SamplingError> {
        match obj.get("required") {
            None => Ok(Vec::new()),
            Some(Value::Array(r)) => r
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| invalid(ptr, "`required` entries must be strings"))
                })
                .collect(),
            Some(_) => Err(invalid(ptr, "`required` must be an array")),
        }
    }

    pub(super) fn resolve_ref(&mut self, r: &str, ptr: &str) -> Result<String, SamplingError> {
        let Some(fragment) = r.strip_prefix('#') else {
            return Err(unsupported(
                format!("$ref {r} (only local #/... references)"),
                ptr,
            ));
        };
        let ref_name = format!("ref{}", sanitize(fragment));
        if self.rules.contains_key(&ref_name) || self.resolving.contains(r) {
            return Ok(ref_name);
        }
        let target = self
            .root
            .pointer(fragment)
            .ok_or_else(|| invalid(ptr, format!("$ref {r} does not resolve")))?;
        self.resolving.insert(r.to_string());
        let name = self.visit(target, &ref_name, fragment)?;
        self.resolving.remove(r);
        Ok(name)
    }
}
