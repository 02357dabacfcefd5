//! `capflow synth`: write a synthetic Flickr30k-Entities-like dataset (captions with phrase
//! groundings, boxes, aligned caption AMRs and detections) of any size.

use std::path::PathBuf;
use std::time::Instant;

use super::out::{self, status};
use crate::error::Error;
use crate::synth::{write_dataset, SynthConfig};

#[derive(Debug, clap::Args)]
pub struct SynthArgs {
    /// Number of images (ids 2000000, 2000001, ...).
    #[arg(long)]
    pub images: u64,
    /// Seed; image i's content depends only on (seed, i).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output directory (absent or empty).
    #[arg(long)]
    pub out: PathBuf,
    /// Captions per image.
    #[arg(long, default_value_t = 5)]
    pub captions_per_image: usize,
    /// Also draw every scene as `images/<image id>.png` (coloured shapes in the annotated
    /// boxes, for training a model that reads pixels).
    #[arg(long)]
    pub render: bool,
    /// Print what was written as one JSON object on stdout (images, captions, phrases, boxes,
    /// detections, AMR nodes, seed, output directory, elapsed seconds).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SynthArgs) -> Result<(), Error> {
    let config = SynthConfig {
        images: args.images,
        seed: args.seed,
        captions_per_image: args.captions_per_image,
        render: args.render,
    };
    let started = Instant::now();
    let counts = write_dataset(&config, &args.out)?;
    let seconds = started.elapsed().as_secs_f64();
    status!(
        "wrote {} images, {} captions, {} phrases, {} boxes, {} detections, {} AMR nodes to {} in {seconds:.2}s",
        counts.images,
        counts.captions,
        counts.phrases,
        counts.boxes,
        counts.detections,
        counts.amr_nodes,
        args.out.display()
    );
    if args.json {
        out::json(&serde_json::json!({
            "out": args.out.display().to_string(),
            "seed": args.seed,
            "images": counts.images,
            "captions": counts.captions,
            "phrases": counts.phrases,
            "boxes": counts.boxes,
            "detections": counts.detections,
            "amr_nodes": counts.amr_nodes,
            "elapsed_s": seconds,
        }))?;
    }
    Ok(())
}
