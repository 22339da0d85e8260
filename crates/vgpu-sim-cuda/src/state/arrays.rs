//! Arrays and mipmapped arrays: their sizes, creation and destruction.
use vgpu_sys::cuda::*;

use super::{ARRAY_ALIGN, Model, PITCH_ALIGN, R, round_up};

/// Bytes an array of the given shape takes: each row (`width × channels × element`) rounded
/// up to 512, times `max(height,1) × max(depth,1)`, the whole rounded up to 64 KiB.
pub fn array_bytes(
    width: u64,
    height: u64,
    depth: u64,
    format: CUarray_format,
    channels: u32,
) -> R<u64> {
    let elem = array_format_bytes(format).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if !matches!(channels, 1 | 2 | 4) || width == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let row = width
        .checked_mul(elem * u64::from(channels))
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let total = round_up(row, PITCH_ALIGN)
        .checked_mul(height.max(1))
        .and_then(|x| x.checked_mul(depth.max(1)))
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    Ok(round_up(total, ARRAY_ALIGN))
}

/// Bytes of a mipmapped array: the sum of [`array_bytes`] over its levels, each non-zero
/// dimension halved per level (minimum 1).
pub fn mipmap_bytes(
    width: u64,
    height: u64,
    depth: u64,
    format: CUarray_format,
    channels: u32,
    levels: u32,
) -> R<u64> {
    if levels == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let half = |d: u64| if d == 0 { 0 } else { (d / 2).max(1) };
    let (mut w, mut h, mut d) = (width, height, depth);
    let mut sum = 0u64;
    for _ in 0..levels {
        sum = sum
            .checked_add(array_bytes(w, h, d, format, channels)?)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        (w, h, d) = (half(w), half(h), half(d));
    }
    Ok(sum)
}

/// An array or mipmapped array.
#[derive(Clone, Copy, Debug)]
pub struct ArrayObj {
    pub ordinal: usize,
    /// What it is charged ([`array_bytes`], [`mipmap_bytes`]).
    pub bytes: u64,
    /// The bytes its elements take, unpadded (`width × channels × element × max(height, 1) ×
    /// max(depth, 1)`; a mipmapped array's first level): the extent a copy may address.
    pub extent: u64,
    pub ctx: u64,
    pub mipmapped: bool,
}

impl Model {
    /// `cuArrayCreate*`/`cuArray3DCreate*`/`cuMipmappedArrayCreate` (levels 0: a plain array).
    #[allow(clippy::too_many_arguments)]
    pub fn array_create(
        &mut self,
        ctx: Option<u64>,
        width: u64,
        height: u64,
        depth: u64,
        format: CUarray_format,
        channels: u32,
        levels: Option<u32>,
    ) -> R<u64> {
        let o = self.ctx_ordinal(ctx)?;
        let bytes = match levels {
            None => array_bytes(width, height, depth, format, channels)?,
            Some(l) => mipmap_bytes(width, height, depth, format, channels, l)?,
        };
        // Checked by `array_bytes` above: the format is known and nothing overflows.
        let extent = array_format_bytes(format).unwrap_or(0)
            * u64::from(channels)
            * width
            * height.max(1)
            * depth.max(1);
        self.charge(o, bytes)?;
        let h = self.handle();
        self.arrays.insert(
            h,
            ArrayObj {
                ordinal: o,
                bytes,
                extent,
                ctx: ctx.unwrap_or_default(),
                mipmapped: levels.is_some(),
            },
        );
        Ok(h)
    }

    /// `cuArrayDestroy`/`cuMipmappedArrayDestroy`.
    pub fn array_destroy(&mut self, h: u64, mipmapped: bool) -> R<()> {
        match self.arrays.get(&h) {
            Some(a) if a.mipmapped == mipmapped => {
                let a = *a;
                self.arrays.remove(&h);
                self.uncharge(a.ordinal, a.bytes);
                Ok(())
            }
            _ => Err(CUDA_ERROR_INVALID_HANDLE),
        }
    }

    /// Whether plain array `h` holds `n` bytes from byte `offset` of its elements
    /// (`cuMemcpyAtoH`/`HtoA`; with `n` 0, whether it is a plain array).
    pub fn array_holds(&self, h: u64, offset: u64, n: u64) -> R<()> {
        match self.arrays.get(&h) {
            Some(a) if !a.mipmapped && offset.saturating_add(n) <= a.extent => Ok(()),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    }

    /// `cu*ArrayGetMemoryRequirements`: the charged size of array `h` on `dev`.
    pub fn array_requirements(&self, h: u64, mipmapped: bool, dev: i32) -> R<u64> {
        let o = self.ordinal(dev)?;
        match self.arrays.get(&h) {
            Some(a) if a.mipmapped == mipmapped && a.ordinal == o => Ok(a.bytes),
            Some(a) if a.mipmapped == mipmapped => Err(CUDA_ERROR_INVALID_DEVICE),
            _ => Err(CUDA_ERROR_INVALID_HANDLE),
        }
    }
}
