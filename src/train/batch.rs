//! Tensors of one batch, built from encoded samples on the loader thread.

use tch::{Device, Kind, Tensor};

use super::config::ModelConfig;
use super::data::EncodedSample;
use super::model::{ModelInput, CONTROL_TOKENS, GEOMETRY_DIM};
use super::vocab::PAD;

/// One training batch: model inputs, teacher-forcing inputs and targets.
#[derive(Debug)]
pub struct Batch {
    pub input: ModelInput,
    /// `[B, T-1]`: `<bos> w1 ... wn` (padded).
    pub inputs: Tensor,
    /// `[B, T-1]`: `w1 ... wn <eos>` (padded with [`PAD`]).
    pub targets: Tensor,
    /// Target tokens that count in the loss (not padding).
    pub tokens: usize,
    /// Indices of the samples in the batch (into the pool the batch was drawn from).
    pub samples: Vec<usize>,
    /// Words of the vocabulary when the batch was built (a growing vocabulary's output width);
    /// `None`: the model's own.
    pub words: Option<i64>,
}

impl Batch {
    pub fn to_device(&self, device: Device) -> Batch {
        Batch {
            input: self.input.to_device(device),
            inputs: self.inputs.to_device(device),
            targets: self.targets.to_device(device),
            tokens: self.tokens,
            samples: self.samples.clone(),
            words: self.words,
        }
    }
}

/// What a model reads of its regions besides labels and geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionInputs {
    /// Length of the detection feature vectors (0: none).
    pub feature_dim: i64,
    /// Side of the regions' image crops (0: no pixels).
    pub image_crop: i64,
}

impl From<&ModelConfig> for RegionInputs {
    fn from(model: &ModelConfig) -> RegionInputs {
        RegionInputs {
            feature_dim: model.feature_dim,
            image_crop: model.image_crop,
        }
    }
}

/// Builds the batch of `samples[indices]`; `feature_dim > 0` adds the region feature tensor
/// (regions without a feature vector, or with one of another length, get zeros), and
/// `image_crop > 0` the regions' crops (`[B, R, 3, side, side]` u8; zeros where a region has
/// none).
pub fn build_batch(samples: &[EncodedSample], indices: &[usize], inputs: RegionInputs) -> Batch {
    let rows: Vec<&EncodedSample> = indices.iter().map(|&j| &samples[j]).collect();
    batch_of(&rows, indices, inputs)
}

/// Builds the batch of `rows`, the samples at `indices` of the pool they were drawn from (as
/// [`build_batch`], for samples fetched from elsewhere than one slice).
pub fn batch_of(rows: &[&EncodedSample], indices: &[usize], inputs: RegionInputs) -> Batch {
    let (feature_dim, image_crop) = (inputs.feature_dim, inputs.image_crop);
    let b = rows.len();
    let longest = rows
        .iter()
        .map(|s| s.tokens.len())
        .max()
        .unwrap_or(2)
        .max(2);
    let t = longest - 1;
    let regions = rows
        .iter()
        .map(|s| s.regions.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let mut inputs = vec![PAD; b * t];
    let mut targets = vec![PAD; b * t];
    let mut controls = Vec::with_capacity(b * 3);
    let mut labels = vec![0i64; b * regions];
    let mut flags = vec![0i64; b * regions];
    let mut geometry = vec![0f32; b * regions * GEOMETRY_DIM as usize];
    let width = CONTROL_TOKENS as usize + regions;
    let mut mask = vec![false; b * width];
    let fdim = feature_dim.max(0) as usize;
    let mut features = vec![0f32; if fdim > 0 { b * regions * fdim } else { 0 }];
    let side = image_crop.max(0) as usize;
    let crop = 3 * side * side;
    let mut pixels = vec![0u8; b * regions * crop];
    let mut tokens = 0;
    for (row, &s) in rows.iter().enumerate() {
        let n = s.tokens.len() - 1;
        inputs[row * t..row * t + n].copy_from_slice(&s.tokens[..n]);
        targets[row * t..row * t + n].copy_from_slice(&s.tokens[1..]);
        tokens += n;
        controls.extend([s.length_level, s.word_count, s.verb]);
        for m in 0..CONTROL_TOKENS as usize {
            mask[row * width + m] = true;
        }
        for (r, region) in s.regions.iter().enumerate() {
            let at = row * regions + r;
            labels[at] = region.label;
            flags[at] = i64::from(region.in_control);
            let g = at * GEOMETRY_DIM as usize;
            geometry[g..g + GEOMETRY_DIM as usize].copy_from_slice(&region.geometry);
            mask[row * width + CONTROL_TOKENS as usize + r] = true;
            if let Some(f) = region
                .feature
                .as_ref()
                .filter(|f| fdim > 0 && f.len() == fdim)
            {
                features[at * fdim..(at + 1) * fdim].copy_from_slice(f);
            }
            if let Some(p) = region
                .pixels
                .as_ref()
                .filter(|p| crop > 0 && p.len() == crop)
            {
                pixels[at * crop..(at + 1) * crop].copy_from_slice(p);
            }
        }
    }
    let (b, t, r) = (b as i64, t as i64, regions as i64);
    Batch {
        input: ModelInput {
            controls: Tensor::from_slice(&controls).view([b, 3]),
            region_labels: Tensor::from_slice(&labels).view([b, r]),
            region_geometry: Tensor::from_slice(&geometry).view([b, r, GEOMETRY_DIM]),
            region_flags: Tensor::from_slice(&flags).view([b, r]),
            region_features: (fdim > 0)
                .then(|| Tensor::from_slice(&features).view([b, r, fdim as i64])),
            region_pixels: (side > 0).then(|| {
                let side = side as i64;
                Tensor::from_slice(&pixels).view([b, r, 3, side, side])
            }),
            memory_mask: Tensor::from_slice(&mask)
                .view([b, 1, 1, CONTROL_TOKENS + r])
                .to_kind(Kind::Bool),
        },
        inputs: Tensor::from_slice(&inputs).view([b, t]),
        targets: Tensor::from_slice(&targets).view([b, t]),
        tokens,
        samples: indices.to_vec(),
        words: None,
    }
}
