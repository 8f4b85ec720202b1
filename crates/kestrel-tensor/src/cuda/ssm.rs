//! The CUDA engine's state-space ops (`kernels/ssm.cu`): the causal depthwise convolution and
//! the selective scan of one sequence's step, each reading and updating the sequence's
//! recurrent state in device memory, with the CPU engine's parameters ([`SsmScanParams`]) and
//! meaning ([`crate::cpu::ssm_conv`], [`crate::cpu::ssm_scan`]). Also zeroing a state (a
//! sequence that starts over).

use cudarc::driver::LaunchConfig;

use super::engine::{cfg, driver, f32_vector, grid_for, i32_of};
use super::{CudaDevice, DeviceTensor};
use crate::cpu::SsmScanParams;
use crate::error::{Result, TensorError};

/// Most state values per channel the scan kernel keeps (`SSM_MAX_STATE` in ssm.cu).
pub const MAX_SSM_STATE: usize = 256;

impl CudaDevice {
    /// Zeroes `t` on the stream (a recurrent state whose sequence starts over).
    ///
    /// # Errors
    /// A driver error.
    pub fn zero(&self, t: &mut DeviceTensor) -> Result<()> {
        self.stream
            .memset_zeros(&mut t.buf)
            .map_err(driver("cuMemsetD8"))
    }

    /// The causal depthwise convolution of the `n_t` tokens of `x` (`[n_t][channels]`) with
    /// `d_conv` taps a channel (`weight`, `[channels][d_conv]`, oldest first) plus `bias`,
    /// carrying `state` (`[channels][d_conv - 1]`, updated): [`crate::cpu::ssm_conv`].
    ///
    /// # Errors
    /// A width of 0, buffers of other sizes or dtypes than F32, a launch failure.
    #[allow(clippy::too_many_arguments)]
    pub fn ssm_conv(
        &self,
        x: &DeviceTensor,
        n_t: usize,
        d_conv: usize,
        (weight, bias): (&DeviceTensor, Option<&DeviceTensor>),
        state: &mut DeviceTensor,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda ssm_conv";
        if d_conv == 0 || n_t == 0 {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "a convolution of width 0, or no tokens",
            });
        }
        let channels = x.shape.elem_count() / n_t;
        f32_vector(OP, "x", x, n_t * channels)?;
        f32_vector(OP, "out", out, n_t * channels)?;
        f32_vector(OP, "weight", weight, channels * d_conv)?;
        f32_vector(OP, "state", state, channels * (d_conv - 1))?;
        if let Some(b) = bias {
            f32_vector(OP, "bias", b, channels)?;
        }
        let (nt, ch, dc) = (i32_of(OP, n_t)?, i32_of(OP, channels)?, i32_of(OP, d_conv)?);
        let null = 0u64;
        let f = self.func("ssm_conv_f32")?;
        let mut b = self.launch(f);
        b.arg(&x.buf).arg(&weight.buf);
        match bias {
            Some(t) => b.arg(&t.buf),
            None => b.arg(&null),
        };
        b.arg(&mut state.buf)
            .arg(&mut out.buf)
            .arg(&nt)
            .arg(&ch)
            .arg(&dc);
        // SAFETY: every buffer holds the f32 values the dimensions give (checked); a thread
        // per channel.
        unsafe { b.launch(cfg(grid_for(channels, 256)?, (256, 1))) }
            .map_err(driver("launch ssm_conv"))?;
        Ok(())
    }

    /// The selective scan of the `n_t` tokens of one sequence plus the skip term, carrying
    /// `state` (`[channels][d_state]`, updated): [`crate::cpu::ssm_scan`] (`x`, `y`
    /// `[n_t][channels]`, `dt` `[n_t][n_head]` biased, `bc` `[n_t][2 · n_group · d_state]`, `a`
    /// `[n_head][d_state]` or `[n_head]`, `d` `[n_head]`).
    ///
    /// # Errors
    /// Heads that are not a whole number of groups, a state of 0 or over 256 values a channel,
    /// buffers of other sizes or dtypes than F32, a launch failure.
    #[allow(clippy::too_many_arguments)]
    pub fn ssm_scan(
        &self,
        p: &SsmScanParams,
        state: &mut DeviceTensor,
        (x, dt, bc): (&DeviceTensor, &DeviceTensor, &DeviceTensor),
        (a, d): (&DeviceTensor, &DeviceTensor),
        n_t: usize,
        y: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda ssm_scan";
        let (ds, nh, hd, ng) = (p.d_state, p.n_head, p.head_dim, p.n_group);
        if ng == 0 || nh == 0 || !nh.is_multiple_of(ng) || hd == 0 {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "the heads must be a non-zero whole number of groups",
            });
        }
        if ds == 0 || ds > MAX_SSM_STATE {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "a state of 1 to 256 values a channel",
            });
        }
        let ch = p.channels();
        f32_vector(OP, "state", state, p.state_len())?;
        f32_vector(OP, "x", x, n_t * ch)?;
        f32_vector(OP, "y", y, n_t * ch)?;
        f32_vector(OP, "dt", dt, n_t * nh)?;
        f32_vector(OP, "bc", bc, n_t * 2 * ng * ds)?;
        f32_vector(OP, "a", a, if p.a_per_state { nh * ds } else { nh })?;
        f32_vector(OP, "d", d, nh)?;
        if n_t == 0 {
            return Ok(());
        }
        let (nt, ds, nh, hd, ng) = (
            i32_of(OP, n_t)?,
            i32_of(OP, ds)?,
            i32_of(OP, nh)?,
            i32_of(OP, hd)?,
            i32_of(OP, ng)?,
        );
        let per_state = i32::from(p.a_per_state);
        let f = self.func("ssm_scan_f32")?;
        let mut b = self.launch(f);
        b.arg(&mut state.buf)
            .arg(&x.buf)
            .arg(&dt.buf)
            .arg(&a.buf)
            .arg(&bc.buf)
            .arg(&d.buf)
            .arg(&mut y.buf)
            .arg(&nt)
            .arg(&ds)
            .arg(&nh)
            .arg(&hd)
            .arg(&ng)
            .arg(&per_state);
        let launch = LaunchConfig {
            grid_dim: (grid_for(ch, 4)?, 1, 1),
            block_dim: (32, 4, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: every buffer holds the f32 values the parameters give (checked); a warp per
        // channel, d_state within the kernel's registers.
        unsafe { b.launch(launch) }.map_err(driver("launch ssm_scan"))?;
        Ok(())
    }
}
