//! Training data: samples and the detections their region tokens come from, read from capflow
//! datasets ([`crate::export::samples`]), encoded with a [`Vocabulary`], and grouped into batches by token budget.

use crate::schema::{BoxXyxy, DetectionRow, SampleRow};
use crate::seed::{splitmix64, SplitMix64};

/// The samples, detections and references of the datasets a model trains on, read as
/// `capflow eval controls` reads them.
pub use crate::export::samples::{RegionContext, SampleData as TrainingData};

use super::config::TrainConfig;
use super::pixels::ImageCrops;
use super::vocab::{Vocabulary, LABEL_CONTROL};

/// Box overlap above which a detection counts as one of the control boxes.
pub const CONTROL_IOU: f64 = 0.5;

impl TrainingData {
    /// The samples a configuration trains on: its splits and methods, non-empty texts.
    pub fn select(&self, config: &TrainConfig) -> Vec<SampleRow> {
        self.samples
            .iter()
            .filter(|s| trains_on(config, s))
            .cloned()
            .collect()
    }
}

/// Whether a configuration trains on `sample`: one of its splits and methods, with a text.
pub fn trains_on(config: &TrainConfig, sample: &SampleRow) -> bool {
    crate::schema::split_selected(&config.splits, &sample.split)
        && (config.methods.is_empty() || config.methods.contains(&sample.method))
        && !sample.text.trim().is_empty()
}

/// One region token: a detection or a control box no detection covers.
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    pub label: i64,
    /// `x1/W, y1/H, x2/W, y2/H, area/(W·H)`.
    pub geometry: [f32; 5],
    pub in_control: bool,
    pub feature: Option<Vec<f32>>,
    /// The region's crop of its image, `[3, side, side]` (`model.image_crop > 0`).
    pub pixels: Option<Vec<u8>>,
}

/// A sample as the model reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct EncodedSample {
    /// `<bos> words <eos>`.
    pub tokens: Vec<i64>,
    pub regions: Vec<Region>,
    pub length_level: i64,
    pub word_count: i64,
    pub verb: i64,
}

fn geometry(b: &BoxXyxy, (w, h): (f64, f64)) -> [f32; 5] {
    let (w, h) = (w.max(1.0), h.max(1.0));
    [
        (b.x1 / w) as f32,
        (b.y1 / h) as f32,
        (b.x2 / w) as f32,
        (b.y2 / h) as f32,
        (b.area() / (w * h)) as f32,
    ]
}

/// The region tokens of a sample: control boxes that no detection covers (IoU ≥
/// [`CONTROL_IOU`]) first, labelled with their control label when the sample has one label per
/// box, then the image's detections by score, flagged when they cover a control box; at most
/// `max_regions`. With `images`, each region carries its crop of the sample's image.
pub fn sample_regions(
    sample: &SampleRow,
    context: &RegionContext,
    vocab: &Vocabulary,
    max_regions: usize,
    images: Option<&ImageCrops>,
) -> Vec<Region> {
    let size = context.size_of(&sample.image_id, &sample.control_boxes);
    let detections: &[DetectionRow] = context
        .detections
        .get(&sample.image_id)
        .map_or(&[], Vec::as_slice);
    let labelled = sample.control_labels.len() == sample.control_boxes.len();
    // Each region with its box, for its crop.
    let mut regions: Vec<(Region, BoxXyxy)> = sample
        .control_boxes
        .iter()
        .enumerate()
        .filter(|(_, b)| !detections.iter().any(|d| d.bbox.iou(b) >= CONTROL_IOU))
        .map(|(k, b)| {
            let region = Region {
                label: if labelled {
                    vocab.label_id(&sample.control_labels[k])
                } else {
                    LABEL_CONTROL
                },
                geometry: geometry(b, size),
                in_control: true,
                feature: None,
                pixels: None,
            };
            (region, *b)
        })
        .collect();
    regions.extend(detections.iter().map(|d| {
        let region = Region {
            label: vocab.label_id(&d.label),
            geometry: geometry(&d.bbox, size),
            in_control: sample
                .control_boxes
                .iter()
                .any(|b| d.bbox.iou(b) >= CONTROL_IOU),
            feature: d.feature.clone(),
            pixels: None,
        };
        (region, d.bbox)
    }));
    regions.truncate(max_regions);
    let (mut regions, boxes): (Vec<Region>, Vec<BoxXyxy>) = regions.into_iter().unzip();
    if let Some(images) = images {
        let file_name = context.file_names.get(&sample.image_id).map(String::as_str);
        let crops = images.crops(&sample.image_id, file_name, &boxes, size);
        for (region, crop) in regions.iter_mut().zip(crops) {
            region.pixels = crop;
        }
    }
    regions
}

/// Encodes a sample for the model; `images` cuts its regions' crops (a model with
/// `image_crop > 0`).
pub fn encode_sample(
    sample: &SampleRow,
    context: &RegionContext,
    vocab: &Vocabulary,
    config: &TrainConfig,
    images: Option<&ImageCrops>,
) -> EncodedSample {
    EncodedSample {
        tokens: vocab.encode_text(&sample.text, config.model.max_tokens),
        regions: sample_regions(sample, context, vocab, config.model.max_regions, images),
        length_level: i64::from(sample.length_level.max(0)),
        word_count: i64::from(sample.word_count.max(0)).min(config.model.max_word_count),
        verb: vocab.verb_id(&sample.verbs),
    }
}

/// Groups sample indices into batches: a seeded shuffle, then windows of 64 batches' worth of
/// samples sorted by length (so a batch holds captions of similar length and little padding),
/// cut whenever `samples × longest caption` would pass the token budget, and the batches
/// shuffled again. `lengths[j]` is sample `j`'s token count.
pub fn plan_batches(
    pool: &[usize],
    lengths: &[u32],
    token_budget: usize,
    max_batch_samples: usize,
    seed: u64,
) -> Vec<Vec<usize>> {
    let mut rng = SplitMix64::new(seed);
    let mut order = pool.to_vec();
    shuffle(&mut order, &mut rng);
    let window = (token_budget / 8).max(1) * 64;
    let mut batches = Vec::new();
    for chunk in order.chunks(window) {
        let mut chunk = chunk.to_vec();
        chunk.sort_by_key(|&j| lengths[j]);
        let mut current: Vec<usize> = Vec::new();
        let mut longest = 0;
        for j in chunk {
            let len = lengths[j] as usize;
            let longer = longest.max(len);
            if !current.is_empty()
                && ((current.len() + 1) * longer > token_budget
                    || current.len() >= max_batch_samples)
            {
                batches.push(std::mem::take(&mut current));
                longest = 0;
            }
            longest = longest.max(len);
            current.push(j);
        }
        if !current.is_empty() {
            batches.push(current);
        }
    }
    shuffle(&mut batches, &mut rng);
    batches
}

/// Fisher-Yates with SplitMix64.
pub fn shuffle<T>(items: &mut [T], rng: &mut SplitMix64) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i + 1);
        items.swap(i, j);
    }
}

/// Samples drawn with replacement with the given weights (the `balanced` option's epochs).
pub fn weighted_epoch(pool: &[usize], weights: &[f64], seed: u64) -> Vec<usize> {
    let total: f64 = weights.iter().sum();
    let mut cumulative = Vec::with_capacity(weights.len());
    let mut acc = 0.0;
    for w in weights {
        acc += w / total;
        cumulative.push(acc);
    }
    let mut rng = SplitMix64::new(seed);
    (0..pool.len())
        .map(|_| {
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let at = cumulative.partition_point(|&c| c <= u).min(pool.len() - 1);
            pool[at]
        })
        .collect()
}

/// The seed of one epoch of one data segment.
pub fn epoch_seed(seed: u64, segment: u64, epoch: u64) -> u64 {
    splitmix64(splitmix64(splitmix64(seed) ^ segment) ^ epoch)
}
