//! The controllable captioner: a transformer encoder over control tokens and region tokens, and
//! an autoregressive transformer decoder (pre-layer-norm, GELU, tied output embedding).
//!
//! Encoder input, one token each:
//! - the length level, the word count and the verb (control tokens);
//! - every region: label embedding + a linear map of its box geometry + an "in the control set"
//!   embedding (+ a linear map of its feature vector when `feature_dim > 0`, + the image
//!   encoder's reading of its crop of the image when `image_crop > 0`).
//!
//! The image encoder is a small CNN trained from scratch with the rest: three 3×3 convolutions
//! (32, 64 and 128 channels, the last two with stride 2, ReLU after each) over the region's
//! `image_crop` × `image_crop` RGB crop, flattened and mapped linearly to `d_model`.
//!
//! Parameters live in one [`Parameters`] list (names, tensors, whether weight decay applies), so
//! the optimizer and checkpoints see them in one fixed order. With [`Precision::Bf16`] the matrix
//! products run in bf16 on f32 weights; norms, softmax and the loss stay in f32.

use tch::{Device, Kind, Tensor};

use super::config::{ModelConfig, Precision};
use super::vocab::{Vocabulary, BOS, EOS, PAD};

/// Length levels the embedding has room for (SSA uses 1-5, CLID 1-7, paragraphs 1-13).
pub const MAX_LENGTH_LEVEL: i64 = 15;
/// Geometry features per region.
pub const GEOMETRY_DIM: i64 = 5;
/// Control tokens before the regions: length level, word count, verb.
pub const CONTROL_TOKENS: i64 = 3;

/// libtorch's default generator is process-wide: whoever seeds it and then draws from it
/// (initialisation, a training step's dropout masks) holds this lock, so that several trainers in
/// one process (tests, `train compare`) still draw exactly their own sequences.
pub static TORCH_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds [`TORCH_RNG`]; a panic elsewhere while it was held leaves nothing to repair.
pub fn lock_rng() -> std::sync::MutexGuard<'static, ()> {
    TORCH_RNG
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The trainable tensors of a model in creation order.
#[derive(Debug, Default)]
pub struct Parameters {
    pub names: Vec<String>,
    pub tensors: Vec<Tensor>,
    /// Weight decay applies to matrices (embeddings and linear weights), not to biases and norms.
    pub decay: Vec<bool>,
    /// Every parameter's values in one f32 tensor: first those weight decay applies to, then
    /// the others, each group in creation order; each tensor of `tensors` is a view of its
    /// slice ([`Parameters::flatten`]).
    pub flat: Option<Tensor>,
    /// Where each tensor's slice of `flat` starts, by index into `tensors`.
    pub offsets: Vec<i64>,
    /// The tensors' indices in the order of `flat`.
    pub flat_order: Vec<usize>,
    /// Elements at the head of `flat` that weight decay applies to.
    pub decayed: i64,
}

impl Parameters {
    fn add(&mut self, name: String, value: Tensor, decay: bool) -> Tensor {
        let value = value.set_requires_grad(true);
        self.names.push(name);
        self.tensors.push(value.shallow_clone());
        self.decay.push(decay);
        value
    }

    fn normal(&mut self, name: String, shape: &[i64], device: Device) -> Tensor {
        let value = (Tensor::randn(shape, (Kind::Float, Device::Cpu)) * 0.02).to_device(device);
        self.add(name, value, true)
    }

    /// Normal with standard deviation `sqrt(2 / fan_in)` (He et al. 2015), for the image
    /// encoder's ReLU convolutions.
    fn he_normal(&mut self, name: String, shape: &[i64], fan_in: i64, device: Device) -> Tensor {
        let std = (2.0 / fan_in as f64).sqrt();
        let value = (Tensor::randn(shape, (Kind::Float, Device::Cpu)) * std).to_device(device);
        self.add(name, value, true)
    }

    fn constant(&mut self, name: String, shape: &[i64], value: f64, device: Device) -> Tensor {
        let value = Tensor::full(shape, value, (Kind::Float, device));
        self.add(name, value, false)
    }

    /// Moves every parameter into one flat tensor and makes each a view of its slice, so that
    /// the optimizer updates all of them with a few kernels instead of a few per parameter
    /// (what PyTorch's `foreach` optimizers do). The parameters weight decay applies to come
    /// first, so that the decay is one in-place kernel over the head of the flat tensor. The
    /// tensors keep their identity: the layers' handles to them see the new storage.
    pub(crate) fn flatten(&mut self) {
        if self.tensors.is_empty() {
            return;
        }
        let count = self.tensors.len();
        self.flat_order = (0..count)
            .filter(|&k| self.decay[k])
            .chain((0..count).filter(|&k| !self.decay[k]))
            .collect();
        let pieces: Vec<Tensor> = self
            .flat_order
            .iter()
            .map(|&k| self.tensors[k].detach().reshape([-1]))
            .collect();
        let flat = Tensor::cat(&pieces, 0);
        self.offsets = vec![0; count];
        self.decayed = 0;
        let mut offset = 0;
        for &k in &self.flat_order {
            let tensor = &mut self.tensors[k];
            let n = tensor.numel() as i64;
            let view = flat.narrow(0, offset, n).view(tensor.size().as_slice());
            tensor.set_data(&view);
            self.offsets[k] = offset;
            if self.decay[k] {
                self.decayed += n;
            }
            offset += n;
        }
        self.flat = Some(flat);
    }

    pub fn count(&self) -> i64 {
        self.tensors.iter().map(Tensor::numel).sum::<usize>() as i64
    }
}

struct Linear {
    weight: Tensor,
    bias: Tensor,
}

impl Linear {
    fn new(p: &mut Parameters, name: &str, inputs: i64, outputs: i64, device: Device) -> Linear {
        Linear {
            weight: p.normal(format!("{name}.weight"), &[outputs, inputs], device),
            bias: p.constant(format!("{name}.bias"), &[outputs], 0.0, device),
        }
    }

    fn forward(&self, x: &Tensor, bf16: bool) -> Tensor {
        if bf16 {
            x.to_kind(Kind::BFloat16).linear(
                &self.weight.to_kind(Kind::BFloat16),
                Some(self.bias.to_kind(Kind::BFloat16)),
            )
        } else {
            x.linear(&self.weight, Some(&self.bias))
        }
    }
}

/// A 3×3 convolution with padding 1.
struct Conv {
    weight: Tensor,
    bias: Tensor,
    stride: i64,
}

impl Conv {
    fn new(
        p: &mut Parameters,
        name: &str,
        (inputs, outputs): (i64, i64),
        stride: i64,
        device: Device,
    ) -> Conv {
        Conv {
            weight: p.he_normal(
                format!("{name}.weight"),
                &[outputs, inputs, 3, 3],
                inputs * 9,
                device,
            ),
            bias: p.constant(format!("{name}.bias"), &[outputs], 0.0, device),
            stride,
        }
    }

    fn forward(&self, x: &Tensor, bf16: bool) -> Tensor {
        let (weight, bias) = if bf16 {
            (
                self.weight.to_kind(Kind::BFloat16),
                self.bias.to_kind(Kind::BFloat16),
            )
        } else {
            (self.weight.shallow_clone(), self.bias.shallow_clone())
        };
        x.conv2d(&weight, Some(&bias), [self.stride], [1], [1], 1)
    }
}

/// Reads each region's crop of its image: `[B, R, 3, s, s]` u8 → `[B, R, d]`.
struct ImageEncoder {
    convs: [Conv; 3],
    out: Linear,
}

impl ImageEncoder {
    const CHANNELS: [i64; 3] = [32, 64, 128];

    fn new(p: &mut Parameters, side: i64, d: i64, device: Device) -> ImageEncoder {
        let [c1, c2, c3] = Self::CHANNELS;
        let convs = [
            Conv::new(p, "image.conv1", (3, c1), 1, device),
            Conv::new(p, "image.conv2", (c1, c2), 2, device),
            Conv::new(p, "image.conv3", (c2, c3), 2, device),
        ];
        let cells = (side / 4) * (side / 4);
        ImageEncoder {
            convs,
            out: Linear::new(p, "image.out", c3 * cells, d, device),
        }
    }

    fn forward(&self, pixels: &Tensor, bf16: bool) -> Tensor {
        let size = pixels.size();
        let (b, r, side) = (size[0], size[1], size[3]);
        // Bytes to [-1, 1].
        let mut x = pixels
            .view([b * r, 3, side, side])
            .to_kind(Kind::Float)
            .g_mul_scalar(2.0 / 255.0)
            .g_sub_scalar(1.0);
        if bf16 {
            x = x.to_kind(Kind::BFloat16);
        }
        for conv in &self.convs {
            x = conv.forward(&x, bf16).relu();
        }
        self.out
            .forward(&x.view([b, r, -1]), bf16)
            .to_kind(Kind::Float)
    }
}

struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    dim: i64,
}

impl LayerNorm {
    fn new(p: &mut Parameters, name: &str, dim: i64, device: Device) -> LayerNorm {
        LayerNorm {
            weight: p.constant(format!("{name}.weight"), &[dim], 1.0, device),
            bias: p.constant(format!("{name}.bias"), &[dim], 0.0, device),
            dim,
        }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        x.to_kind(Kind::Float).layer_norm(
            [self.dim],
            Some(&self.weight),
            Some(&self.bias),
            1e-5,
            true,
        )
    }
}

struct Attention {
    /// Self-attention: one projection to q, k, v. Cross-attention: q from the decoder, k and v
    /// from the encoder memory.
    qkv: Option<Linear>,
    q: Option<Linear>,
    kv: Option<Linear>,
    out: Linear,
    heads: i64,
    d_model: i64,
}

impl Attention {
    fn new(
        p: &mut Parameters,
        name: &str,
        cfg: &ModelConfig,
        cross: bool,
        device: Device,
    ) -> Attention {
        let d = cfg.d_model;
        let (qkv, q, kv) = if cross {
            (
                None,
                Some(Linear::new(p, &format!("{name}.q"), d, d, device)),
                Some(Linear::new(p, &format!("{name}.kv"), d, 2 * d, device)),
            )
        } else {
            (
                Some(Linear::new(p, &format!("{name}.qkv"), d, 3 * d, device)),
                None,
                None,
            )
        };
        Attention {
            qkv,
            q,
            kv,
            out: Linear::new(p, &format!("{name}.out"), d, d, device),
            heads: cfg.heads,
            d_model: d,
        }
    }

    fn heads_first(&self, x: &Tensor) -> Tensor {
        let (b, t, _) = x.size3().unwrap_or((0, 0, 0));
        x.view([b, t, self.heads, self.d_model / self.heads])
            .transpose(1, 2)
    }

    /// `mask`: bool `[B, 1, 1, S]`, true where a key may be attended to.
    fn forward(
        &self,
        x: &Tensor,
        memory: Option<&Tensor>,
        mask: Option<&Tensor>,
        causal: bool,
        bf16: bool,
    ) -> Tensor {
        let (b, t, _) = x.size3().unwrap_or((0, 0, 0));
        let (q, k, v) = match (&self.qkv, &self.q, &self.kv, memory) {
            (Some(qkv), _, _, _) => {
                let parts = qkv.forward(x, bf16).chunk(3, -1);
                (
                    parts[0].shallow_clone(),
                    parts[1].shallow_clone(),
                    parts[2].shallow_clone(),
                )
            }
            (None, Some(q), Some(kv), Some(memory)) => {
                let parts = kv.forward(memory, bf16).chunk(2, -1);
                (
                    q.forward(x, bf16),
                    parts[0].shallow_clone(),
                    parts[1].shallow_clone(),
                )
            }
            _ => unreachable!("cross-attention is always given the encoder memory"),
        };
        let y = Tensor::scaled_dot_product_attention(
            &self.heads_first(&q),
            &self.heads_first(&k),
            &self.heads_first(&v),
            mask,
            0.0,
            causal,
            None::<f64>,
            false,
        );
        let y = y.transpose(1, 2).contiguous().view([b, t, self.d_model]);
        self.out.forward(&y, bf16)
    }
}

struct FeedForward {
    up: Linear,
    down: Linear,
}

impl FeedForward {
    fn new(p: &mut Parameters, name: &str, cfg: &ModelConfig, device: Device) -> FeedForward {
        FeedForward {
            up: Linear::new(p, &format!("{name}.up"), cfg.d_model, cfg.ff_dim, device),
            down: Linear::new(p, &format!("{name}.down"), cfg.ff_dim, cfg.d_model, device),
        }
    }

    fn forward(&self, x: &Tensor, bf16: bool) -> Tensor {
        self.down
            .forward(&self.up.forward(x, bf16).gelu("none"), bf16)
    }
}

struct EncoderLayer {
    norm1: LayerNorm,
    attention: Attention,
    norm2: LayerNorm,
    ff: FeedForward,
}

struct DecoderLayer {
    norm1: LayerNorm,
    self_attention: Attention,
    norm2: LayerNorm,
    cross_attention: Attention,
    norm3: LayerNorm,
    ff: FeedForward,
}

/// Model inputs of one batch, on the model's device.
#[derive(Debug)]
pub struct ModelInput {
    /// `[B, 3]`: length level, word count, verb id.
    pub controls: Tensor,
    /// `[B, R]` label ids (0 = padding).
    pub region_labels: Tensor,
    /// `[B, R, 5]` f32.
    pub region_geometry: Tensor,
    /// `[B, R]` 0/1.
    pub region_flags: Tensor,
    /// `[B, R, F]` f32 when the model reads feature vectors.
    pub region_features: Option<Tensor>,
    /// `[B, R, 3, S, S]` u8 when the model reads its regions' image crops.
    pub region_pixels: Option<Tensor>,
    /// `[B, 1, 1, 3 + R]` bool, true for real tokens.
    pub memory_mask: Tensor,
}

impl ModelInput {
    pub fn to_device(&self, device: Device) -> ModelInput {
        ModelInput {
            controls: self.controls.to_device(device),
            region_labels: self.region_labels.to_device(device),
            region_geometry: self.region_geometry.to_device(device),
            region_flags: self.region_flags.to_device(device),
            region_features: self.region_features.as_ref().map(|f| f.to_device(device)),
            region_pixels: self.region_pixels.as_ref().map(|p| p.to_device(device)),
            memory_mask: self.memory_mask.to_device(device),
        }
    }
}

/// The captioner.
pub struct Captioner {
    pub config: ModelConfig,
    pub parameters: Parameters,
    pub device: Device,
    /// Words the output layer scores: the vocabulary's words, fewer than the embedding's rows
    /// while a growing vocabulary has rows to spare (the training sink sets it per batch).
    pub output_words: i64,
    bf16: bool,
    word_embedding: Tensor,
    position_embedding: Tensor,
    label_embedding: Tensor,
    flag_embedding: Tensor,
    level_embedding: Tensor,
    count_embedding: Tensor,
    verb_embedding: Tensor,
    type_embedding: Tensor,
    geometry: Linear,
    feature: Option<Linear>,
    image: Option<ImageEncoder>,
    encoder: Vec<EncoderLayer>,
    encoder_norm: LayerNorm,
    decoder: Vec<DecoderLayer>,
    decoder_norm: LayerNorm,
}

/// Whether a precision setting means bf16 on this device.
pub fn uses_bf16(precision: Precision, device: Device) -> bool {
    match precision {
        Precision::Bf16 => true,
        Precision::F32 => false,
        Precision::Auto => device.is_cuda(),
    }
}

// `x += y` on tch tensors is the in-place `add_`, which would overwrite activations autograd
// saved for the backward pass (layer norm inputs); the residual sums stay out of place.
#[allow(clippy::assign_op_pattern)]
impl Captioner {
    /// A freshly initialised model; the initial weights depend only on `seed` (they are drawn on
    /// the CPU and then moved to `device`).
    pub fn new(
        config: &ModelConfig,
        vocab: &Vocabulary,
        device: Device,
        precision: Precision,
        seed: u64,
    ) -> Captioner {
        let _rng = lock_rng();
        tch::manual_seed(seed as i64);
        let p = &mut Parameters::default();
        let d = config.d_model;
        let word_embedding = p.normal("embed.words".into(), &[vocab.word_rows(), d], device);
        let position_embedding = p.normal(
            "embed.positions".into(),
            &[config.max_tokens as i64, d],
            device,
        );
        let label_embedding = p.normal("embed.labels".into(), &[vocab.label_rows(), d], device);
        let flag_embedding = p.normal("embed.control_flag".into(), &[2, d], device);
        let level_embedding = p.normal(
            "embed.length_level".into(),
            &[MAX_LENGTH_LEVEL + 1, d],
            device,
        );
        let count_embedding = p.normal(
            "embed.word_count".into(),
            &[config.max_word_count + 1, d],
            device,
        );
        let verb_embedding = p.normal("embed.verbs".into(), &[vocab.verb_rows(), d], device);
        let type_embedding = p.normal("embed.token_type".into(), &[CONTROL_TOKENS + 1, d], device);
        let geometry = Linear::new(p, "embed.geometry", GEOMETRY_DIM, d, device);
        let feature = (config.feature_dim > 0)
            .then(|| Linear::new(p, "embed.feature", config.feature_dim, d, device));
        let encoder = (0..config.encoder_layers)
            .map(|i| {
                let name = format!("encoder.{i}");
                EncoderLayer {
                    norm1: LayerNorm::new(p, &format!("{name}.norm1"), d, device),
                    attention: Attention::new(
                        p,
                        &format!("{name}.attention"),
                        config,
                        false,
                        device,
                    ),
                    norm2: LayerNorm::new(p, &format!("{name}.norm2"), d, device),
                    ff: FeedForward::new(p, &format!("{name}.ff"), config, device),
                }
            })
            .collect();
        let encoder_norm = LayerNorm::new(p, "encoder.norm", d, device);
        let decoder = (0..config.decoder_layers)
            .map(|i| {
                let name = format!("decoder.{i}");
                DecoderLayer {
                    norm1: LayerNorm::new(p, &format!("{name}.norm1"), d, device),
                    self_attention: Attention::new(
                        p,
                        &format!("{name}.self_attention"),
                        config,
                        false,
                        device,
                    ),
                    norm2: LayerNorm::new(p, &format!("{name}.norm2"), d, device),
                    cross_attention: Attention::new(
                        p,
                        &format!("{name}.cross_attention"),
                        config,
                        true,
                        device,
                    ),
                    norm3: LayerNorm::new(p, &format!("{name}.norm3"), d, device),
                    ff: FeedForward::new(p, &format!("{name}.ff"), config, device),
                }
            })
            .collect();
        let decoder_norm = LayerNorm::new(p, "decoder.norm", d, device);
        // Last, so that a model without pixels draws the same initial weights as before.
        let image =
            (config.image_crop > 0).then(|| ImageEncoder::new(p, config.image_crop, d, device));
        p.flatten();
        Captioner {
            config: config.clone(),
            parameters: std::mem::take(p),
            device,
            output_words: (vocab.words.len() as i64).max(1),
            bf16: uses_bf16(precision, device),
            word_embedding,
            position_embedding,
            label_embedding,
            flag_embedding,
            level_embedding,
            count_embedding,
            verb_embedding,
            type_embedding,
            geometry,
            feature,
            image,
            encoder,
            encoder_norm,
            decoder,
            decoder_norm,
        }
    }

    pub fn is_bf16(&self) -> bool {
        self.bf16
    }

    fn dropout(&self, x: Tensor, train: bool) -> Tensor {
        if train && self.config.dropout > 0.0 {
            x.dropout(self.config.dropout, true)
        } else {
            x
        }
    }

    /// The encoder memory `[B, 3 + R, d]`.
    pub fn encode(&self, input: &ModelInput, train: bool) -> Tensor {
        let embed = |table: &Tensor, ids: &Tensor| Tensor::embedding(table, ids, -1, false, false);
        let controls = Tensor::stack(
            &[
                embed(
                    &self.level_embedding,
                    &input.controls.select(1, 0).clamp(0, MAX_LENGTH_LEVEL),
                ),
                embed(
                    &self.count_embedding,
                    &input
                        .controls
                        .select(1, 1)
                        .clamp(0, self.config.max_word_count),
                ),
                embed(&self.verb_embedding, &input.controls.select(1, 2)),
            ],
            1,
        ) + self
            .type_embedding
            .narrow(0, 0, CONTROL_TOKENS)
            .unsqueeze(0);
        let mut regions = embed(&self.label_embedding, &input.region_labels)
            + self
                .geometry
                .forward(&input.region_geometry, self.bf16)
                .to_kind(Kind::Float)
            + embed(&self.flag_embedding, &input.region_flags)
            + self.type_embedding.get(CONTROL_TOKENS);
        if let (Some(feature), Some(values)) = (&self.feature, &input.region_features) {
            regions = regions + feature.forward(values, self.bf16).to_kind(Kind::Float);
        }
        if let (Some(image), Some(pixels)) = (&self.image, &input.region_pixels) {
            regions = regions + image.forward(pixels, self.bf16);
        }
        let mut x = self.dropout(Tensor::cat(&[controls, regions], 1), train);
        for layer in &self.encoder {
            let h = layer.attention.forward(
                &layer.norm1.forward(&x),
                None,
                Some(&input.memory_mask),
                false,
                self.bf16,
            );
            x = x + self.dropout(h.to_kind(Kind::Float), train);
            let h = layer.ff.forward(&layer.norm2.forward(&x), self.bf16);
            x = x + self.dropout(h.to_kind(Kind::Float), train);
        }
        self.encoder_norm.forward(&x)
    }

    /// Next-token logits `[B, T, V]` (f32) for decoder inputs `[B, T]`.
    pub fn decode(
        &self,
        tokens: &Tensor,
        memory: &Tensor,
        memory_mask: &Tensor,
        train: bool,
    ) -> Tensor {
        let t = tokens.size()[1];
        let mut x = Tensor::embedding(&self.word_embedding, tokens, PAD, false, false)
            + self.position_embedding.narrow(0, 0, t).unsqueeze(0);
        x = self.dropout(x, train);
        for layer in &self.decoder {
            let h =
                layer
                    .self_attention
                    .forward(&layer.norm1.forward(&x), None, None, true, self.bf16);
            x = x + self.dropout(h.to_kind(Kind::Float), train);
            let h = layer.cross_attention.forward(
                &layer.norm2.forward(&x),
                Some(memory),
                Some(memory_mask),
                false,
                self.bf16,
            );
            x = x + self.dropout(h.to_kind(Kind::Float), train);
            let h = layer.ff.forward(&layer.norm3.forward(&x), self.bf16);
            x = x + self.dropout(h.to_kind(Kind::Float), train);
        }
        let x = self.decoder_norm.forward(&x);
        let rows = self.word_embedding.size()[0];
        let output = if self.output_words < rows {
            self.word_embedding.narrow(0, 0, self.output_words)
        } else {
            self.word_embedding.shallow_clone()
        };
        if self.bf16 {
            x.to_kind(Kind::BFloat16)
                .matmul(&output.to_kind(Kind::BFloat16).tr())
                .to_kind(Kind::Float)
        } else {
            x.matmul(&output.tr())
        }
    }

    /// Logits for teacher-forced decoder inputs.
    pub fn forward(&self, input: &ModelInput, tokens: &Tensor, train: bool) -> Tensor {
        let memory = self.encode(input, train);
        self.decode(tokens, &memory, &input.memory_mask, train)
    }

    /// Mean per-token log-likelihood of each target sequence (`<eos>` included, padding not):
    /// `log p(y|x)` of CLID's Eq. 2. Returns one value per sample.
    pub fn mean_log_likelihood(
        &self,
        input: &ModelInput,
        inputs: &Tensor,
        targets: &Tensor,
    ) -> Vec<f64> {
        tch::no_grad(|| {
            let logits = self.forward(input, inputs, false);
            let log_probs = logits.log_softmax(-1, Kind::Float);
            let picked = log_probs
                .gather(2, &targets.unsqueeze(-1), false)
                .squeeze_dim(-1);
            let mask = targets.ne(PAD).to_kind(Kind::Float);
            let sums = (picked * &mask).sum_dim_intlist(&[1i64][..], false, Kind::Double);
            let counts = mask
                .sum_dim_intlist(&[1i64][..], false, Kind::Double)
                .clamp_min(1.0);
            let mean = (sums / counts).to_device(Device::Cpu);
            Vec::<f64>::try_from(&mean).unwrap_or_default()
        })
    }

    /// Greedy decoding: the most likely next token until `<eos>` or `max_tokens`. Returns the
    /// generated ids per sample (without `<bos>`, up to and without `<eos>`).
    pub fn greedy_decode(&self, input: &ModelInput) -> Vec<Vec<i64>> {
        tch::no_grad(|| {
            let memory = self.encode(input, false);
            let batch = memory.size()[0];
            let mut tokens = Tensor::full([batch, 1], BOS, (Kind::Int64, self.device));
            let mut finished = Tensor::zeros([batch], (Kind::Bool, self.device));
            for _ in 1..self.config.max_tokens {
                let logits = self.decode(&tokens, &memory, &input.memory_mask, false);
                let next = logits.select(1, -1).argmax(-1, false);
                let next = next.masked_fill(&finished, PAD);
                finished = finished.logical_or(&next.eq(EOS));
                tokens = Tensor::cat(&[tokens, next.unsqueeze(1)], 1);
                if finished.all().to_kind(Kind::Int64).int64_value(&[]) != 0 {
                    break;
                }
            }
            let tokens = tokens
                .narrow(1, 1, tokens.size()[1] - 1)
                .to_device(Device::Cpu);
            let rows: Vec<Vec<i64>> = Vec::<Vec<i64>>::try_from(&tokens).unwrap_or_default();
            rows.into_iter()
                .map(|row| {
                    row.into_iter()
                        .take_while(|&id| id != EOS && id != PAD)
                        .collect()
                })
                .collect()
        })
    }
}
