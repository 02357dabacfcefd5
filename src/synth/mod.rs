//! Synthetic Flickr30k-Entities-like data at any scale, for benchmarks and scale tests.
//!
//! Each image is a small scene drawn from a generative grammar over the [`lexicon`]: a main
//! actor (a person or a pet, alone or in a group of two or three), possibly a companion, up to
//! two pieces of clothing, the object of the actor's action and a location. Its captions
//! describe overlapping subsets of that scene with different wording (synonyms, optional
//! attributes, optional clothing and location, simple or progressive verb), so that merging the
//! captions' graphs has shared concepts to merge. For every caption the generator writes, in one
//! pass and from the same derivation:
//!
//! - the Flickr30k Entities markup (`[/EN#<chain>/<type> ...]`) and the image's annotation XML
//!   with one box per group member and a `<scene>` flag for the location;
//! - the caption's AMR in PENMAN, every concept that comes from a word aligned (`~e.N`, ISI
//!   style) to that word;
//! - COCO-instances detections: the grounded boxes jittered, with a score, plus distractors.
//!
//! Everything about image `i` is a function of `(seed, i)` only, so a run with more images
//! starts with exactly the files of a run with fewer (prefix stability), and the writer streams
//! image by image in bounded memory. See `docs/synth.md` for the size distribution.

pub mod lexicon;
pub mod render;

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::seed::{mix64, SplitMix64};
use lexicon::{ActorClass, EntityKind, Location, Noun, Placement, Verb};

/// First image id; image `i` is `BASE_IMAGE_ID + i`.
pub const BASE_IMAGE_ID: u64 = 2_000_000;

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SynthConfig {
    pub images: u64,
    pub seed: u64,
    pub captions_per_image: usize,
    /// Also draw every scene as `images/<image id>.png` ([`render`]).
    pub render: bool,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            images: 100,
            seed: 0,
            captions_per_image: 5,
            render: false,
        }
    }
}

/// Counts of what a run wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SynthCounts {
    pub images: u64,
    pub captions: u64,
    pub phrases: u64,
    pub boxes: u64,
    pub detections: u64,
    pub amr_nodes: u64,
    pub tokens: u64,
}

/// The generator of the synthetic data: SplitMix64, so that the data never changes with a
/// dependency's version.
#[derive(Clone, Debug)]
pub struct Rng(SplitMix64);

impl Rng {
    /// The generator of image `index` under `seed`.
    pub fn for_image(seed: u64, index: u64) -> Rng {
        Rng(SplitMix64::new(mix64(
            mix64(seed ^ 0x5eed_ca9f_1000_0000).wrapping_add(index.wrapping_mul(0x9e37_79b9)),
        )))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in `[0, n)`; `n` must be positive.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() >> 32) * n) >> 32
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    /// A uniformly chosen element; `items` must not be empty.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// The split of an image, from a hash of its id alone (94 % train, 3 % validation, 3 % test,
/// like the Karpathy split of Flickr30k).
pub fn split_of(image_id: u64) -> &'static str {
    match mix64(image_id ^ 0x0051_1700) % 100 {
        0..=93 => "train",
        94..=96 => "validation",
        _ => "test",
    }
}

/// A box in Flickr30k Entities' 1-based inclusive corners.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlickrBox {
    pub xmin: u32,
    pub ymin: u32,
    pub xmax: u32,
    pub ymax: u32,
}

impl FlickrBox {
    /// A box from fractional edges, clamped inside a `width` × `height` image and at least two
    /// pixels wide and tall.
    fn clamped(x1: f64, y1: f64, x2: f64, y2: f64, width: u32, height: u32) -> FlickrBox {
        let clamp = |v: f64, max: u32| (v.round().max(1.0) as u32).min(max);
        let xmin = clamp(x1, width - 2);
        let ymin = clamp(y1, height - 2);
        let xmax = clamp(x2, width).max(xmin + 2);
        let ymax = clamp(y2, height).max(ymin + 2);
        FlickrBox {
            xmin,
            ymin,
            xmax,
            ymax,
        }
    }
    fn width(&self) -> f64 {
        f64::from(self.xmax - self.xmin + 1)
    }
    fn height(&self) -> f64 {
        f64::from(self.ymax - self.ymin + 1)
    }
}

/// One entity of a scene: a coreference chain with its boxes.
#[derive(Clone, Debug)]
pub struct Entity {
    pub chain: u64,
    pub kind: &'static EntityKind,
    /// Group size (1 for a single object).
    pub count: u32,
    /// The attribute true of it (captions may or may not say it).
    pub adjective: &'static str,
    /// The synonym most captions use.
    pub preferred: usize,
    pub boxes: Vec<FlickrBox>,
}

/// The location of a scene (a Flickr `scene` chain without a box).
#[derive(Clone, Debug)]
pub struct SceneLocation {
    pub chain: u64,
    pub location: &'static Location,
    pub modifier: &'static str,
}

/// A detector output in COCO's 0-based `[x, y, w, h]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Detection {
    pub id: u64,
    pub category_id: u32,
    pub bbox: [f64; 4],
    pub score: f64,
}

/// One generated caption: tokens, phrase spans and the aligned AMR.
#[derive(Clone, Debug)]
pub struct SynthCaption {
    pub tokens: Vec<String>,
    /// `(token_start, token_end, chain, flickr type)`, in token order.
    pub phrases: Vec<(usize, usize, u64, &'static str)>,
    pub amr: AmrNode,
}

/// A node of a caption's AMR tree.
#[derive(Clone, Debug)]
pub struct AmrNode {
    pub concept: String,
    pub token: Option<usize>,
    pub edges: Vec<(&'static str, AmrChild)>,
}

#[derive(Clone, Debug)]
pub enum AmrChild {
    Node(AmrNode),
    /// A constant (`:quant 2`) with its aligned token.
    Constant(String, Option<usize>),
}

impl AmrNode {
    fn new(concept: impl Into<String>, token: Option<usize>) -> AmrNode {
        AmrNode {
            concept: concept.into(),
            token,
            edges: Vec::new(),
        }
    }
    fn with(mut self, role: &'static str, child: AmrNode) -> AmrNode {
        self.edges.push((role, AmrChild::Node(child)));
        self
    }
    /// Number of concept nodes.
    pub fn node_count(&self) -> usize {
        1 + self
            .edges
            .iter()
            .map(|(_, c)| match c {
                AmrChild::Node(n) => n.node_count(),
                AmrChild::Constant(..) => 0,
            })
            .sum::<usize>()
    }
}

/// Everything generated for one image.
#[derive(Clone, Debug)]
pub struct SynthImage {
    pub image_id: u64,
    pub width: u32,
    pub height: u32,
    pub actor: Entity,
    pub companion: Option<Entity>,
    pub clothing: Vec<Entity>,
    pub object: Option<Entity>,
    pub location: SceneLocation,
    pub verb: &'static Verb,
    pub captions: Vec<SynthCaption>,
    pub detections: Vec<Detection>,
}

fn pick_size(rng: &mut Rng) -> (u32, u32) {
    let total: u32 = lexicon::IMAGE_SIZES.iter().map(|s| s.2).sum();
    let mut r = rng.below(u64::from(total)) as u32;
    for &(w, h, weight) in lexicon::IMAGE_SIZES {
        if r < weight {
            return (w, h);
        }
        r -= weight;
    }
    (500, 375)
}

fn pick_entity(rng: &mut Rng, chain: u64, kind: &'static EntityKind, count: u32) -> Entity {
    // Most captions use the first synonym; a third of the scenes prefer another one.
    let preferred = if kind.nouns.len() > 1 && rng.chance(0.3) {
        rng.below(kind.nouns.len() as u64) as usize
    } else {
        0
    };
    Entity {
        chain,
        kind,
        count,
        adjective: rng.pick(kind.adjectives),
        preferred,
        boxes: Vec::new(),
    }
}

/// Boxes for a group of figures (people or animals) standing side by side in `[x0, x1)` of the
/// image width.
fn figure_boxes(
    rng: &mut Rng,
    count: u32,
    animal: bool,
    x0: f64,
    x1: f64,
    width: u32,
    height: u32,
) -> Vec<FlickrBox> {
    let h = f64::from(height);
    let slot = (x1 - x0) / f64::from(count);
    (0..count)
        .map(|k| {
            let left = x0 + slot * f64::from(k);
            let (bw, bh) = if animal {
                (slot * rng.range(0.55, 0.95), h * rng.range(0.25, 0.6))
            } else {
                (slot * rng.range(0.4, 0.8), h * rng.range(0.45, 0.95))
            };
            let bx = left + (slot - bw) * rng.unit();
            let bottom = h * rng.range(0.85, 1.0);
            FlickrBox::clamped(bx, bottom - bh, bx + bw, bottom, width, height)
        })
        .collect()
}

/// A box for `placement` relative to the actor's first box.
fn placed_box(
    rng: &mut Rng,
    placement: Placement,
    actor: FlickrBox,
    width: u32,
    height: u32,
) -> FlickrBox {
    let (ax, ay, aw, ah) = (
        f64::from(actor.xmin),
        f64::from(actor.ymin),
        actor.width(),
        actor.height(),
    );
    let (x1, y1, x2, y2) = match placement {
        Placement::UpperBody => (
            ax + aw * rng.range(0.0, 0.12),
            ay + ah * rng.range(0.15, 0.25),
            ax + aw * rng.range(0.88, 1.0),
            ay + ah * rng.range(0.5, 0.65),
        ),
        Placement::Head => (
            ax + aw * rng.range(0.25, 0.35),
            ay,
            ax + aw * rng.range(0.65, 0.75),
            ay + ah * rng.range(0.08, 0.15),
        ),
        Placement::Ridden => (
            ax - aw * rng.range(0.1, 0.4),
            ay + ah * rng.range(0.45, 0.6),
            ax + aw * rng.range(1.1, 1.4),
            ay + ah * rng.range(0.95, 1.05),
        ),
        Placement::Handheld => {
            let cx = ax + aw * rng.range(0.3, 0.7);
            let cy = ay + ah * rng.range(0.35, 0.6);
            let s = aw * rng.range(0.2, 0.45);
            (cx - s / 2.0, cy - s / 2.0, cx + s / 2.0, cy + s / 2.0)
        }
        Placement::Beside | Placement::Animal | Placement::Figure => {
            let right = rng.chance(0.5);
            let bw = aw * rng.range(0.4, 0.9);
            let bh = ah * rng.range(0.2, 0.45);
            let x = if right { ax + aw } else { ax - bw };
            let bottom = ay + ah * rng.range(0.9, 1.0);
            (x, bottom - bh, x + bw, bottom)
        }
    };
    FlickrBox::clamped(x1, y1, x2, y2, width, height)
}

/// Generates image `index` of a run with `seed`.
pub fn generate_image(seed: u64, index: u64, captions_per_image: usize) -> SynthImage {
    let mut rng = Rng::for_image(seed, index);
    let image_id = BASE_IMAGE_ID + index;
    let (width, height) = pick_size(&mut rng);
    let chain_base = index * 100;
    let class = if rng.chance(0.75) {
        ActorClass::Person
    } else {
        ActorClass::Pet
    };
    let verbs: Vec<&Verb> = lexicon::VERBS
        .iter()
        .filter(|(c, _)| *c == class)
        .map(|(_, v)| v)
        .collect();
    let verb: &'static Verb = rng.pick(&verbs);
    let actor_kind: &'static EntityKind = match class {
        ActorClass::Person => rng.pick(lexicon::PEOPLE),
        ActorClass::Pet => rng.pick(lexicon::PETS),
    };
    let count = match rng.below(100) {
        0..=79 => 1,
        80..=92 => 2,
        _ => 3,
    };
    let mut actor = pick_entity(&mut rng, chain_base + 1, actor_kind, count);
    let animal = class == ActorClass::Pet;
    // A companion only joins intransitive scenes ("a man and a woman walk ...").
    let companion_wanted = verb.object.is_none() && rng.chance(0.35);
    let split = if companion_wanted {
        rng.range(0.45, 0.65)
    } else {
        1.0
    };
    let w = f64::from(width);
    let margin = w * rng.range(0.0, 0.3) * (1.0 - split.min(0.99));
    let span = if companion_wanted {
        (margin, w * split)
    } else {
        let used = w * rng.range(0.35, 0.8) * f64::from(count).sqrt().min(1.6) / 1.2;
        let used = used.min(w * 0.95);
        let start = (w - used) * rng.unit();
        (start, start + used)
    };
    actor.boxes = figure_boxes(&mut rng, count, animal, span.0, span.1, width, height);
    let companion = companion_wanted.then(|| {
        let kind: &'static EntityKind = match class {
            ActorClass::Person => rng.pick(lexicon::PEOPLE),
            ActorClass::Pet => rng.pick(lexicon::PETS),
        };
        let mut c = pick_entity(&mut rng, chain_base + 2, kind, 1);
        c.boxes = figure_boxes(&mut rng, 1, animal, w * split, w, width, height);
        c
    });
    let first = actor.boxes[0];
    let mut clothing = Vec::new();
    if class == ActorClass::Person && count == 1 {
        let wanted = match rng.below(10) {
            0..=1 => 0,
            2..=5 => 1,
            _ => 2,
        };
        let kinds: [&'static EntityKind; 2] = if rng.chance(0.5) {
            [&lexicon::UPPER_CLOTHING, &lexicon::HEADWEAR]
        } else {
            [&lexicon::HEADWEAR, &lexicon::UPPER_CLOTHING]
        };
        for (k, kind) in kinds.iter().take(wanted).enumerate() {
            let mut c = pick_entity(&mut rng, chain_base + 3 + k as u64, kind, 1);
            c.boxes = vec![placed_box(&mut rng, kind.placement, first, width, height)];
            clothing.push(c);
        }
    }
    let object = verb.object.map(|(_, kinds)| {
        let kind: &'static EntityKind = rng.pick(kinds);
        let mut o = pick_entity(&mut rng, chain_base + 5, kind, 1);
        o.boxes = vec![placed_box(&mut rng, kind.placement, first, width, height)];
        o
    });
    let location_entry = &lexicon::LOCATIONS[rng.below(lexicon::LOCATIONS.len() as u64) as usize];
    let location = SceneLocation {
        chain: chain_base + 6,
        location: location_entry,
        modifier: rng.pick(location_entry.modifiers),
    };
    let mut image = SynthImage {
        image_id,
        width,
        height,
        actor,
        companion,
        clothing,
        object,
        location,
        verb,
        captions: Vec::new(),
        detections: Vec::new(),
    };
    for _ in 0..captions_per_image {
        let caption = generate_caption(&mut rng, &image);
        image.captions.push(caption);
    }
    image.detections = detections(&mut rng, &image, index);
    image
}

/// Builds the tokens and phrase spans of one caption.
struct CaptionBuilder {
    tokens: Vec<String>,
    phrases: Vec<(usize, usize, u64, &'static str)>,
}

impl CaptionBuilder {
    fn word(&mut self, word: &str) -> usize {
        self.tokens.push(word.to_string());
        self.tokens.len() - 1
    }

    /// Writes a noun phrase for `entity` and returns its AMR node.
    fn noun_phrase(&mut self, rng: &mut Rng, entity: &Entity, definite: bool) -> AmrNode {
        let start = self.tokens.len();
        let noun: Noun = if rng.chance(0.75) {
            entity.kind.nouns[entity.preferred]
        } else {
            rng.pick(entity.kind.nouns)
        };
        let with_adjective = rng.chance(0.65);
        let mut quant = None;
        if entity.count > 1 {
            if definite && rng.chance(0.3) {
                self.word("the");
            }
            let i = self.word(lexicon::number_word(entity.count));
            quant = Some((entity.count.to_string(), i));
        } else if definite {
            self.word("the");
        } else {
            let next = if with_adjective {
                entity.adjective
            } else {
                noun.singular
            };
            let article = if next.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            self.word(article);
        }
        let adjective = with_adjective.then(|| self.word(entity.adjective));
        let head = self.word(if entity.count > 1 {
            noun.plural
        } else {
            noun.singular
        });
        self.phrases.push((
            start,
            self.tokens.len(),
            entity.chain,
            entity.kind.flickr_type,
        ));
        let mut node = AmrNode::new(noun.lemma, Some(head));
        if let Some((value, token)) = quant {
            node.edges
                .push((":quant", AmrChild::Constant(value, Some(token))));
        }
        if let Some(token) = adjective {
            node = node.with(":mod", AmrNode::new(entity.adjective, Some(token)));
        }
        node
    }

    fn location_phrase(&mut self, rng: &mut Rng, scene: &SceneLocation) -> AmrNode {
        self.word(rng.pick(scene.location.prepositions));
        let start = self.tokens.len();
        self.word(if rng.chance(0.5) { "the" } else { "a" });
        let modifier = rng.chance(0.6).then(|| self.word(scene.modifier));
        if modifier.is_none() && self.tokens[start] == "a" {
            // "a" before a bare noun reads oddly for mass nouns like snow; keep "the".
            self.tokens[start] = "the".to_string();
        }
        let head = self.word(scene.location.noun);
        self.phrases
            .push((start, self.tokens.len(), scene.chain, "scene"));
        let mut node = AmrNode::new(scene.location.noun, Some(head));
        if let Some(token) = modifier {
            node = node.with(":mod", AmrNode::new(scene.modifier, Some(token)));
        }
        node
    }
}

fn fix_article(tokens: &mut [String]) {
    for i in 0..tokens.len().saturating_sub(1) {
        if tokens[i] == "a" || tokens[i] == "an" {
            let next = &tokens[i + 1];
            let vowel = next.starts_with(['a', 'e', 'i', 'o', 'u']) && !next.starts_with("uni");
            tokens[i] = if vowel { "an" } else { "a" }.to_string();
        }
    }
}

fn generate_caption(rng: &mut Rng, image: &SynthImage) -> SynthCaption {
    let mut b = CaptionBuilder {
        tokens: Vec::new(),
        phrases: Vec::new(),
    };
    let verb = image.verb;
    let with_companion = image.companion.is_some() && rng.chance(0.55);
    let plural = with_companion || image.actor.count > 1;
    let mut subject = b.noun_phrase(rng, &image.actor, false);
    if !with_companion && !image.clothing.is_empty() {
        let mentioned: Vec<&Entity> = image.clothing.iter().filter(|_| rng.chance(0.7)).collect();
        if !mentioned.is_empty() {
            let style = rng.below(3);
            let wear = if style == 0 {
                Some(b.word("wearing"))
            } else {
                b.word(if style == 1 { "in" } else { "with" });
                None
            };
            let mut items = Vec::new();
            let mut and_token = None;
            for (k, c) in mentioned.iter().enumerate() {
                if k > 0 {
                    and_token = Some(b.word("and"));
                }
                items.push(b.noun_phrase(rng, c, false));
            }
            let worn = match and_token {
                Some(token) => {
                    let mut and = AmrNode::new("and", Some(token));
                    for (k, item) in items.into_iter().enumerate() {
                        and = and.with(if k == 0 { ":op1" } else { ":op2" }, item);
                    }
                    and
                }
                None => items.remove(0),
            };
            subject = subject.with(
                ":ARG0-of",
                AmrNode::new("wear-01", wear).with(":ARG1", worn),
            );
        }
    }
    if let (true, Some(companion)) = (with_companion, &image.companion) {
        let and = b.word("and");
        let other = b.noun_phrase(rng, companion, false);
        subject = AmrNode::new("and", Some(and))
            .with(":op1", subject)
            .with(":op2", other);
    }
    let progressive = rng.chance(0.45);
    let verb_token = if progressive {
        b.word(if plural { "are" } else { "is" });
        b.word(verb.progressive)
    } else {
        b.word(if plural { verb.base } else { verb.third_person })
    };
    let mut root = AmrNode::new(verb.frame, Some(verb_token)).with(verb.subject_role, subject);
    if let (Some((role, _)), Some(object)) = (verb.object, &image.object) {
        let definite = rng.chance(0.2);
        let node = b.noun_phrase(rng, object, definite);
        root = root.with(role, node);
    }
    let needs_location = verb.object.is_none() || b.tokens.len() < 5;
    if needs_location || rng.chance(0.85) {
        let node = b.location_phrase(rng, &image.location);
        root = root.with(":location", node);
    }
    b.word(".");
    fix_article(&mut b.tokens);
    if let Some(first) = b.tokens.first_mut() {
        let mut chars = first.chars();
        if let Some(c) = chars.next() {
            *first = c.to_uppercase().chain(chars).collect();
        }
    }
    SynthCaption {
        tokens: b.tokens,
        phrases: b.phrases,
        amr: root,
    }
}

fn detections(rng: &mut Rng, image: &SynthImage, index: u64) -> Vec<Detection> {
    let mut out = Vec::new();
    let (w, h) = (f64::from(image.width), f64::from(image.height));
    let mut next_id = index * 100;
    let mut push = |category_id: u32, x1: f64, y1: f64, x2: f64, y2: f64, score: f64| {
        let x1 = x1.clamp(0.0, w - 1.0);
        let y1 = y1.clamp(0.0, h - 1.0);
        let x2 = x2.clamp(x1 + 1.0, w);
        let y2 = y2.clamp(y1 + 1.0, h);
        let round = |v: f64| (v * 100.0).round() / 100.0;
        next_id += 1;
        out.push(Detection {
            id: next_id,
            category_id,
            bbox: [round(x1), round(y1), round(x2 - x1), round(y2 - y1)],
            score: (score * 1000.0).round() / 1000.0,
        });
    };
    let grounded = std::iter::once(&image.actor)
        .chain(image.companion.iter())
        .chain(image.object.iter());
    for entity in grounded {
        let Some((category, _)) = entity.kind.coco else {
            continue;
        };
        for b in &entity.boxes {
            if rng.chance(0.04) {
                continue; // the detector misses a few objects
            }
            let (bw, bh) = (b.width(), b.height());
            let j = |rng: &mut Rng, s: f64| s * rng.range(-0.05, 0.05);
            let x1 = f64::from(b.xmin) - 1.0 + j(rng, bw);
            let y1 = f64::from(b.ymin) - 1.0 + j(rng, bh);
            let x2 = f64::from(b.xmax) + j(rng, bw);
            let y2 = f64::from(b.ymax) + j(rng, bh);
            let score = rng.range(0.55, 0.995);
            push(category, x1, y1, x2, y2, score);
        }
    }
    for _ in 0..rng.below(3) {
        let (category, _) = rng.pick(lexicon::DISTRACTORS);
        let bw = w * rng.range(0.05, 0.3);
        let bh = h * rng.range(0.05, 0.3);
        let x = (w - bw) * rng.unit();
        let y = (h - bh) * rng.unit();
        let score = rng.range(0.3, 0.85);
        push(category, x, y, x + bw, y + bh, score);
    }
    out
}

impl SynthCaption {
    /// The caption in Flickr30k Entities markup.
    pub fn markup(&self) -> String {
        let mut out = String::new();
        for (i, token) in self.tokens.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            if let Some(&(_, _, chain, kind)) = self.phrases.iter().find(|p| p.0 == i) {
                let _ = write!(out, "[/EN#{chain}/{kind} ");
            }
            out.push_str(token);
            if self.phrases.iter().any(|p| p.1 == i + 1) {
                out.push(']');
            }
        }
        out
    }

    /// The caption's AMR block: `# ::id`, `# ::snt`, `# ::tok` and the aligned graph.
    pub fn penman(&self, image_id: u64, k: usize) -> String {
        let text = self.tokens.join(" ");
        let mut out = format!("# ::id {image_id}.{k}\n# ::snt {text}\n# ::tok {text}\n");
        let mut used = Vec::new();
        write_node(&mut out, &self.amr, 1, &mut used);
        out.push('\n');
        out
    }
}

fn variable_for(concept: &str, used: &mut Vec<String>) -> String {
    let letter = concept
        .chars()
        .find(char::is_ascii_alphabetic)
        .map_or('x', |c| c.to_ascii_lowercase());
    let mut var = letter.to_string();
    let mut n = 2;
    while used.contains(&var) {
        var = format!("{letter}{n}");
        n += 1;
    }
    used.push(var.clone());
    var
}

fn write_node(out: &mut String, node: &AmrNode, depth: usize, used: &mut Vec<String>) {
    let var = variable_for(&node.concept, used);
    let _ = write!(out, "({var} / {}", node.concept);
    if let Some(t) = node.token {
        let _ = write!(out, "~e.{t}");
    }
    for (role, child) in &node.edges {
        out.push('\n');
        out.push_str(&" ".repeat(6 * depth));
        out.push_str(role);
        out.push(' ');
        match child {
            AmrChild::Node(n) => write_node(out, n, depth + 1, used),
            AmrChild::Constant(value, token) => {
                out.push_str(value);
                if let Some(t) = token {
                    let _ = write!(out, "~e.{t}");
                }
            }
        }
    }
    out.push(')');
}

impl SynthImage {
    /// Every entity with boxes (the actor, companion, clothing and object).
    pub fn boxed_entities(&self) -> impl Iterator<Item = &Entity> {
        std::iter::once(&self.actor)
            .chain(self.companion.iter())
            .chain(self.clothing.iter())
            .chain(self.object.iter())
    }

    /// The `Sentences/<id>.txt` file.
    pub fn sentences(&self) -> String {
        let mut out = String::new();
        for c in &self.captions {
            out.push_str(&c.markup());
            out.push('\n');
        }
        out
    }

    /// The `Annotations/<id>.xml` file: only chains some caption mentions (every chain in it
    /// is mentioned, as upstream).
    pub fn annotation_xml(&self) -> String {
        let mentioned = |chain: u64| {
            self.captions
                .iter()
                .any(|c| c.phrases.iter().any(|p| p.2 == chain))
        };
        let mut out = format!(
            "<annotation>\n\t<filename>{}.jpg</filename>\n\t<size>\n\t\t<width>{}</width>\n\t\t<height>{}</height>\n\t\t<depth>3</depth>\n\t</size>\n",
            self.image_id, self.width, self.height
        );
        for entity in self.boxed_entities().filter(|e| mentioned(e.chain)) {
            for b in &entity.boxes {
                let _ = write!(
                    out,
                    "\t<object>\n\t\t<name>{}</name>\n\t\t<bndbox>\n\t\t\t<xmin>{}</xmin>\n\t\t\t<ymin>{}</ymin>\n\t\t\t<xmax>{}</xmax>\n\t\t\t<ymax>{}</ymax>\n\t\t</bndbox>\n\t</object>\n",
                    entity.chain, b.xmin, b.ymin, b.xmax, b.ymax
                );
            }
        }
        if mentioned(self.location.chain) {
            let _ = write!(
                out,
                "\t<object>\n\t\t<name>{}</name>\n\t\t<nobndbox>0</nobndbox>\n\t\t<scene>1</scene>\n\t</object>\n",
                self.location.chain
            );
        }
        out.push_str("</annotation>\n");
        out
    }

    /// The image's record in `instances.json`'s `images`.
    pub fn coco_image_json(&self) -> String {
        format!(
            "{{\"license\": 1, \"file_name\": \"{id}.jpg\", \"height\": {h}, \"width\": {w}, \"id\": {id}}}",
            id = self.image_id,
            h = self.height,
            w = self.width
        )
    }

    /// The image's records in `instances.json`'s `annotations`, one per line.
    pub fn coco_annotations_json(&self) -> Vec<String> {
        self.detections
            .iter()
            .map(|d| {
                let [x, y, w, h] = d.bbox;
                format!(
                    "{{\"id\": {}, \"image_id\": {}, \"category_id\": {}, \"bbox\": [{x}, {y}, {w}, {h}], \"area\": {}, \"iscrowd\": 0, \"score\": {}}}",
                    d.id,
                    self.image_id,
                    d.category_id,
                    (w * h * 100.0).round() / 100.0,
                    d.score
                )
            })
            .collect()
    }
}

impl SynthImage {
    /// The image's record in Visual Genome's `scene_graphs.json`: one object per box (0-based
    /// `x, y, w, h`), named by the scene's preferred synonym with its attribute, and the
    /// relationships the scene is built on (the action, what is worn, who is beside whom).
    pub fn scene_graph_json(&self, index: u64) -> String {
        let mut objects = Vec::new();
        let mut ids: Vec<(u64, Vec<u64>)> = Vec::new();
        let mut next = (index + 1) * 100;
        for entity in self.boxed_entities() {
            let lemma = entity.kind.nouns[entity.preferred].lemma;
            let mut chain_ids = Vec::new();
            for b in &entity.boxes {
                next += 1;
                chain_ids.push(next);
                objects.push(format!(
                    "{{\"object_id\": {next}, \"x\": {}, \"y\": {}, \"w\": {}, \"h\": {}, \"names\": [\"{lemma}\"], \"synsets\": [\"{lemma}.n.01\"], \"attributes\": [\"{}\"]}}",
                    b.xmin - 1,
                    b.ymin - 1,
                    b.xmax - b.xmin + 1,
                    b.ymax - b.ymin + 1,
                    entity.adjective
                ));
            }
            ids.push((entity.chain, chain_ids));
        }
        let of = |chain: u64| {
            ids.iter()
                .find(|(c, _)| *c == chain)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let actors = of(self.actor.chain);
        let mut relationships = Vec::new();
        let mut relate = |subject: u64, predicate: &str, synset: &str, object: u64| {
            next += 1;
            relationships.push(format!(
                "{{\"relationship_id\": {next}, \"predicate\": \"{predicate}\", \"subject_id\": {subject}, \"object_id\": {object}, \"synsets\": [\"{synset}\"]}}"
            ));
        };
        if let Some(object) = &self.object {
            let lemma = concept_lemma(self.verb.frame);
            for &a in &actors {
                for &o in &of(object.chain) {
                    relate(a, self.verb.progressive, &format!("{lemma}.v.01"), o);
                }
            }
        }
        if let Some(&first) = actors.first() {
            for c in &self.clothing {
                for &o in &of(c.chain) {
                    relate(first, "wearing", "wear.v.01", o);
                }
            }
            if let Some(companion) = &self.companion {
                for &o in &of(companion.chain) {
                    relate(first, "next to", "next.r.01", o);
                }
            }
        }
        format!(
            "{{\"image_id\": {}, \"objects\": [{}], \"relationships\": [{}]}}",
            self.image_id,
            objects.join(", "),
            relationships.join(", ")
        )
    }

    /// The image's record in Visual Genome's `image_data.json`.
    pub fn vg_image_json(&self) -> String {
        format!(
            "{{\"width\": {w}, \"height\": {h}, \"url\": \"images/{id}.jpg\", \"image_id\": {id}, \"coco_id\": null, \"flickr_id\": {id}}}",
            id = self.image_id,
            w = self.width,
            h = self.height
        )
    }
}

/// The lemma of a PropBank frame (`ride-01` → `ride`).
fn concept_lemma(frame: &str) -> &str {
    frame.rsplit_once('-').map_or(frame, |(lemma, _)| lemma)
}

fn create(path: &Path) -> Result<BufWriter<File>> {
    File::create(path)
        .map(|f| BufWriter::with_capacity(1 << 16, f))
        .map_err(|e| Error::io(path, e))
}

/// The streaming writers of one run.
struct Writers {
    sentences: PathBuf,
    annotations: PathBuf,
    splits: [(BufWriter<File>, PathBuf); 3],
    amr: (BufWriter<File>, PathBuf),
    images_json: (BufWriter<File>, PathBuf),
    annotations_tmp: (BufWriter<File>, PathBuf),
    scene_graphs: (BufWriter<File>, PathBuf),
    vg_images: (BufWriter<File>, PathBuf),
    images_written: u64,
    annotations_written: u64,
}

fn put(writer: &mut (BufWriter<File>, PathBuf), text: &str) -> Result<()> {
    writer
        .0
        .write_all(text.as_bytes())
        .map_err(|e| Error::io(&writer.1, e))
}

/// Writes a synthetic dataset of `config.images` images into `out`, which must be absent or
/// empty (a smaller earlier run's files would otherwise mix with this one's).
pub fn write_dataset(config: &SynthConfig, out: &Path) -> Result<SynthCounts> {
    if config.captions_per_image == 0 {
        return Err(Error::Usage(
            "--captions-per-image must be at least 1".to_string(),
        ));
    }
    if out.exists() {
        let mut entries = std::fs::read_dir(out).map_err(|e| Error::io(out, e))?;
        if entries.next().is_some() {
            return Err(Error::Usage(format!(
                "{}: output directory is not empty",
                out.display()
            )));
        }
    }
    let flickr = out.join("flickr30k_entities");
    let sentences = flickr.join("Sentences");
    let annotations = flickr.join("Annotations");
    let amr_dir = out.join("amr");
    let det_dir = out.join("detections");
    let vg_dir = out.join("visual_genome");
    // No GBC graphs are generated; the directory is there so that recipes with a GBC input
    // (`dataflows/sample.toml`) read it as zero graphs.
    let gbc_dir = out.join("gbc");
    let images_dir = out.join("images");
    if config.render {
        std::fs::create_dir_all(&images_dir).map_err(|e| Error::io(&images_dir, e))?;
    }
    for dir in [
        &sentences,
        &annotations,
        &amr_dir,
        &det_dir,
        &vg_dir,
        &gbc_dir,
    ] {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let split_writer = |name: &str| -> Result<(BufWriter<File>, PathBuf)> {
        let path = flickr.join(format!("{name}.txt"));
        Ok((create(&path)?, path))
    };
    let amr_path = amr_dir.join("captions.amr");
    let json_path = det_dir.join("instances.json");
    let tmp_path = det_dir.join(".instances.annotations.part");
    let mut w = Writers {
        sentences,
        annotations,
        splits: [
            split_writer("train")?,
            split_writer("val")?,
            split_writer("test")?,
        ],
        amr: (create(&amr_path)?, amr_path),
        images_json: (create(&json_path)?, json_path.clone()),
        annotations_tmp: (create(&tmp_path)?, tmp_path.clone()),
        scene_graphs: (
            create(&vg_dir.join("scene_graphs.json"))?,
            vg_dir.join("scene_graphs.json"),
        ),
        vg_images: (
            create(&vg_dir.join("image_data.json"))?,
            vg_dir.join("image_data.json"),
        ),
        images_written: 0,
        annotations_written: 0,
    };
    put(
        &mut w.amr,
        &format!(
            "# capflow synthetic caption AMRs (seed {}): one graph per caption, ISI alignments (~e.N, 0-based token index)\n",
            config.seed
        ),
    )?;
    put(&mut w.scene_graphs, "[\n")?;
    put(&mut w.vg_images, "[\n")?;
    put(
        &mut w.images_json,
        "{\n\"info\": {\"description\": \"capflow synthetic detections\", \"version\": \"1.0\", \"year\": 2025, \"contributor\": \"capflow synth\", \"date_created\": \"2025/01/01\"},\n\"images\": [\n",
    )?;
    let mut counts = SynthCounts::default();
    for index in 0..config.images {
        let image = generate_image(config.seed, index, config.captions_per_image);
        write_image(&mut w, &image, index)?;
        if config.render {
            let path = images_dir.join(format!("{}.png", image.image_id));
            std::fs::write(&path, render::render_png(&image)).map_err(|e| Error::io(&path, e))?;
        }
        counts.images += 1;
        counts.captions += image.captions.len() as u64;
        for c in &image.captions {
            counts.phrases += c.phrases.len() as u64;
            counts.tokens += c.tokens.len() as u64;
            counts.amr_nodes += c.amr.node_count() as u64;
        }
        counts.boxes += image
            .boxed_entities()
            .map(|e| e.boxes.len() as u64)
            .sum::<u64>();
        counts.detections += image.detections.len() as u64;
    }
    let mut licences = String::from(
        "\n],\n\"licenses\": [{\"url\": \"https://www.apache.org/licenses/LICENSE-2.0\", \"id\": 1, \"name\": \"Apache-2.0\"}],\n\"annotations\": [\n",
    );
    licences.shrink_to_fit();
    put(&mut w.images_json, &licences)?;
    w.annotations_tmp
        .0
        .flush()
        .map_err(|e| Error::io(&tmp_path, e))?;
    drop(w.annotations_tmp);
    let mut part = File::open(&tmp_path).map_err(|e| Error::io(&tmp_path, e))?;
    std::io::copy(&mut part, &mut w.images_json.0).map_err(|e| Error::io(&json_path, e))?;
    std::fs::remove_file(&tmp_path).map_err(|e| Error::io(&tmp_path, e))?;
    let mut tail = String::from("\n],\n\"categories\": [\n");
    for (k, (id, name, supercategory)) in lexicon::COCO_CATEGORIES.iter().enumerate() {
        if k > 0 {
            tail.push_str(",\n");
        }
        let _ = write!(
            tail,
            "{{\"supercategory\": \"{supercategory}\", \"id\": {id}, \"name\": \"{name}\"}}"
        );
    }
    tail.push_str("\n]\n}\n");
    put(&mut w.images_json, &tail)?;
    put(&mut w.scene_graphs, "\n]\n")?;
    put(&mut w.vg_images, "\n]\n")?;
    for writer in w.splits.iter_mut().chain([
        &mut w.amr,
        &mut w.images_json,
        &mut w.scene_graphs,
        &mut w.vg_images,
    ]) {
        writer.0.flush().map_err(|e| Error::io(&writer.1, e))?;
    }
    Ok(counts)
}

fn write_image(w: &mut Writers, image: &SynthImage, index: u64) -> Result<()> {
    let id = image.image_id;
    let path = w.sentences.join(format!("{id}.txt"));
    std::fs::write(&path, image.sentences()).map_err(|e| Error::io(&path, e))?;
    let path = w.annotations.join(format!("{id}.xml"));
    std::fs::write(&path, image.annotation_xml()).map_err(|e| Error::io(&path, e))?;
    // The upstream split lists: `train.txt`, `val.txt`, `test.txt`.
    let split = match split_of(id) {
        "train" => 0,
        "validation" => 1,
        _ => 2,
    };
    put(&mut w.splits[split], &format!("{id}\n"))?;
    for (k, c) in image.captions.iter().enumerate() {
        put(&mut w.amr, "\n")?;
        put(&mut w.amr, &c.penman(id, k))?;
    }
    let sep = if w.images_written == 0 { "" } else { ",\n" };
    put(
        &mut w.images_json,
        &format!("{sep}{}", image.coco_image_json()),
    )?;
    put(
        &mut w.scene_graphs,
        &format!("{sep}{}", image.scene_graph_json(index)),
    )?;
    put(&mut w.vg_images, &format!("{sep}{}", image.vg_image_json()))?;
    w.images_written += 1;
    for record in image.coco_annotations_json() {
        let sep = if w.annotations_written == 0 {
            ""
        } else {
            ",\n"
        };
        put(&mut w.annotations_tmp, &format!("{sep}{record}"))?;
        w.annotations_written += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_brackets_each_phrase_once() {
        let caption = SynthCaption {
            tokens: ["A", "dog", "runs", "on", "the", "beach", "."]
                .map(String::from)
                .to_vec(),
            phrases: vec![(0, 2, 7, "animals"), (4, 6, 9, "scene")],
            amr: AmrNode::new("run-02", Some(2)),
        };
        assert_eq!(
            caption.markup(),
            "[/EN#7/animals A dog] runs on [/EN#9/scene the beach] ."
        );
    }

    #[test]
    fn penman_writes_alignments_and_distinct_variables() {
        let amr = AmrNode::new("ride-01", Some(2))
            .with(":ARG0", AmrNode::new("man", Some(1)))
            .with(":ARG1", AmrNode::new("motorcycle", Some(4)));
        let caption = SynthCaption {
            tokens: ["A", "man", "rides", "a", "motorcycle", "."]
                .map(String::from)
                .to_vec(),
            phrases: vec![],
            amr,
        };
        assert_eq!(
            caption.penman(2000000, 0),
            "# ::id 2000000.0\n# ::snt A man rides a motorcycle .\n# ::tok A man rides a motorcycle .\n(r / ride-01~e.2\n      :ARG0 (m / man~e.1)\n      :ARG1 (m2 / motorcycle~e.4))\n"
        );
    }

    #[test]
    fn split_shares_match_the_karpathy_proportions() {
        let mut train = 0;
        for id in 0..10_000u64 {
            if split_of(BASE_IMAGE_ID + id) == "train" {
                train += 1;
            }
        }
        assert!((9_200..=9_600).contains(&train), "{train}");
    }
}
