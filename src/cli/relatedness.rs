//! `capflow relatedness`: visual-relatedness re-ranking, labelling, gender statistics and search
//! on the file layouts of the reference repository (ahmedssabir/Textual-Visual-Semantic-Dataset).
//!
//! Sentence similarities come from a `--sim` file when given (one per line, as the reference's
//! `model.py --sim`), otherwise from SIF sentence vectors over `--vectors` (GloVe or word2vec
//! text) or, without it, over PPMI vectors trained on the input's own captions.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::out::stdout_error;
use crate::augment::relatedness::gender::{gender_cooccurrence, GenderLexicon};
use crate::augment::relatedness::rerank::{
    format_best, format_ranked, format_scored, python_float_repr, read_numbers,
    read_reference_lines, rerank, score_candidates, Candidate,
};
use crate::augment::relatedness::search::{recall_at_k, CaptionIndex};
use crate::augment::relatedness::sif::{content_tokens, SentenceEncoder};
use crate::augment::relatedness::tsv::{
    binary_label, read_pairs, write_soft, write_test, write_train, PairRow, TrainRow,
};
use crate::augment::relatedness::{fit_sif, RelatednessConfig};
use crate::error::{Error, Result};

#[derive(Debug, clap::Subcommand)]
pub enum RelatednessCommand {
    /// Re-rank candidate captions by sim^P(c) (the reference's pre-trained re-ranker): reads
    /// caption, visual-context and probability line files, writes `Visual_re-ranker.txt`,
    /// `Visual_re-rank_re-ranked_output.txt` and, with --image-id, `sample_best.json`.
    Rerank(RerankArgs),
    /// Soft labels (cosine) and binary labels at thresholds for (visual, caption) pairs of a
    /// TSV file; writes `soft_labels.tsv` and `train_<th>.tsv` in the released training layout.
    Label(LabelArgs),
    /// Gender co-occurrence counts and ratios per visual-context word of a TSV file; can write
    /// the gender-neutral version of the file.
    Gender(GenderArgs),
    /// Visual-context caption search over the captions of a TSV file: top-k captions for a
    /// query, or Recall@K with every distinct visual context as a query.
    Search(SearchArgs),
}

#[derive(Debug, clap::Args)]
pub struct EncoderArgs {
    /// Word vectors (GloVe or word2vec text); default: PPMI vectors trained on the input.
    #[arg(long)]
    pub vectors: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct RerankArgs {
    /// Candidate captions, one per line (`caption.txt`).
    #[arg(long)]
    pub captions: PathBuf,
    /// Visual context string per candidate (`visual-context_label.txt`).
    #[arg(long)]
    pub visual: PathBuf,
    /// P(c) per candidate (`visual-context_prob.txt`).
    #[arg(long)]
    pub prob: PathBuf,
    /// Similarity per candidate; computed with SIF sentence vectors when absent.
    #[arg(long)]
    pub sim: Option<PathBuf>,
    #[command(flatten)]
    pub encoder: EncoderArgs,
    /// Output directory; without it the re-ranked list is printed.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Image id for `sample_best.json` (COCO results format).
    #[arg(long)]
    pub image_id: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct LabelArgs {
    /// Pairs in the released layout (`id visual caption`, or the training layout).
    #[arg(long)]
    pub input: PathBuf,
    #[command(flatten)]
    pub encoder: EncoderArgs,
    /// Binary label thresholds.
    #[arg(long, value_delimiter = ',', default_values_t = [0.2, 0.3, 0.4])]
    pub thresholds: Vec<f64>,
    /// Rewrite man/woman words to person/people in visual and caption first.
    #[arg(long)]
    pub gender_neutral: bool,
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct GenderArgs {
    /// Pairs in the released layout.
    #[arg(long)]
    pub input: PathBuf,
    /// Also write the pairs with gendered nouns rewritten (visual and caption) to this file,
    /// in the input's layout.
    #[arg(long)]
    pub neutral_out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// Pairs in the released layout; their captions are searched.
    #[arg(long)]
    pub input: PathBuf,
    #[command(flatten)]
    pub encoder: EncoderArgs,
    /// A visual context to search for; prints the top -k captions.
    #[arg(long)]
    pub query: Option<String>,
    /// Captions to print for --query.
    #[arg(short = 'k', long, default_value_t = 10)]
    pub top: usize,
    /// Ks of the Recall@K report (every distinct visual context is a query; its own rows'
    /// captions are relevant).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 5, 10, 15])]
    pub recall: Vec<usize>,
}

/// Runs one `capflow relatedness` subcommand.
pub fn run(cmd: RelatednessCommand) -> Result<()> {
    match cmd {
        RelatednessCommand::Rerank(args) => run_rerank(&args),
        RelatednessCommand::Label(args) => run_label(&args),
        RelatednessCommand::Gender(args) => run_gender(&args),
        RelatednessCommand::Search(args) => run_search(&args),
    }
}

fn encoder_for(
    captions: &[String],
    visuals: &[String],
    args: &EncoderArgs,
) -> Result<SentenceEncoder> {
    let config = RelatednessConfig {
        vectors: args.vectors.clone(),
        ..RelatednessConfig::default()
    };
    Ok(SentenceEncoder::Sif(fit_sif(captions, visuals, &config)?))
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))
}

fn run_rerank(args: &RerankArgs) -> Result<()> {
    let captions = read_reference_lines(&args.captions)?;
    let visuals = read_reference_lines(&args.visual)?;
    let confidences = read_numbers(&args.prob)?;
    let similarities = match &args.sim {
        Some(path) => {
            let sims = read_numbers(path)?;
            same_length(path, sims.len(), &args.captions, captions.len())?;
            sims
        }
        None => {
            let encoder = encoder_for(&captions, &visuals, &args.encoder)?;
            same_length(&args.visual, visuals.len(), &args.captions, captions.len())?;
            captions
                .iter()
                .zip(&visuals)
                .map(|(caption, visual)| {
                    let sims = encoder.similarities_to(visual, std::slice::from_ref(caption))?;
                    Ok(sims.first().copied().unwrap_or(0.0))
                })
                .collect::<Result<Vec<f64>>>()?
        }
    };
    same_length(&args.visual, visuals.len(), &args.captions, captions.len())?;
    same_length(
        &args.prob,
        confidences.len(),
        &args.captions,
        captions.len(),
    )?;
    let candidates: Vec<Candidate> = captions
        .iter()
        .zip(similarities)
        .zip(confidences)
        .map(|((caption, similarity), confidence)| Candidate {
            caption: caption.clone(),
            similarity,
            confidence,
        })
        .collect();
    let scored = score_candidates(&candidates);
    let ranked = rerank(&scored);
    match &args.out {
        Some(dir) => {
            create_dir(dir)?;
            write_file(&dir.join("Visual_re-ranker.txt"), &format_scored(&scored))?;
            write_file(
                &dir.join("Visual_re-rank_re-ranked_output.txt"),
                &format_ranked(&ranked),
            )?;
            if let Some(image_id) = &args.image_id {
                write_file(
                    &dir.join("sample_best.json"),
                    &(format_best(image_id, &ranked) + "\n"),
                )?;
            }
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(format_ranked(&ranked).as_bytes())
                .map_err(stdout_error)?;
        }
    }
    Ok(())
}

/// The reference indexes its three files in parallel; capflow insists they line up.
fn same_length(path: &Path, len: usize, captions: &Path, expected: usize) -> Result<()> {
    if len == expected {
        return Ok(());
    }
    Err(Error::record(
        path.display().to_string(),
        format!("line {}", len.min(expected) + 1),
        format!(
            "has {len} lines but {} has {expected}; the files must be parallel, one line per candidate",
            captions.display()
        ),
    ))
}

fn neutral_pairs(pairs: &[PairRow], lexicon: &GenderLexicon) -> Vec<PairRow> {
    pairs
        .iter()
        .map(|p| PairRow {
            id: p.id.clone(),
            visual: lexicon.neutral(&p.visual),
            caption: lexicon.neutral(&p.caption),
            label: p.label,
        })
        .collect()
}

fn run_label(args: &LabelArgs) -> Result<()> {
    let mut pairs = read_pairs(&args.input)?;
    if args.gender_neutral {
        pairs = neutral_pairs(&pairs, &GenderLexicon::default());
    }
    let captions: Vec<String> = pairs.iter().map(|p| p.caption.clone()).collect();
    let visuals: Vec<String> = pairs.iter().map(|p| p.visual.clone()).collect();
    let encoder = encoder_for(&captions, &visuals, &args.encoder)?;
    let mut soft = Vec::with_capacity(pairs.len());
    for pair in &pairs {
        let sims = encoder.similarities_to(&pair.visual, std::slice::from_ref(&pair.caption))?;
        soft.push(sims.first().copied().unwrap_or(0.0));
    }
    create_dir(&args.out)?;
    let soft_path = args.out.join("soft_labels.tsv");
    let mut bytes = Vec::new();
    write_soft(&mut bytes, &pairs, &soft).map_err(|e| Error::io(&soft_path, e))?;
    std::fs::write(&soft_path, bytes).map_err(|e| Error::io(&soft_path, e))?;
    for &threshold in &args.thresholds {
        let rows: Vec<TrainRow> = pairs
            .iter()
            .zip(&soft)
            .enumerate()
            .map(|(k, (pair, &sim))| {
                TrainRow::numbered(
                    k as u64,
                    &pair.visual,
                    &pair.caption,
                    binary_label(sim, threshold),
                )
            })
            .collect();
        let path = args.out.join(format!("train_{threshold}.tsv"));
        let mut out = Vec::new();
        write_train(&mut out, &rows).map_err(|e| Error::io(&path, e))?;
        std::fs::write(&path, out).map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}

fn run_gender(args: &GenderArgs) -> Result<()> {
    let lexicon = GenderLexicon::default();
    let pairs = read_pairs(&args.input)?;
    let objects: Vec<Vec<String>> = pairs.iter().map(|p| content_tokens(&p.visual)).collect();
    let table = gender_cooccurrence(
        pairs
            .iter()
            .zip(&objects)
            .map(|(p, o)| (o.iter().map(String::as_str), p.caption.as_str())),
        &lexicon,
    );
    let mut rows: Vec<_> = table.into_iter().collect();
    rows.sort_by(|a, b| {
        let total =
            |c: &crate::augment::relatedness::gender::GenderCounts| c.person + c.man + c.woman;
        total(&b.1).cmp(&total(&a.1)).then_with(|| a.0.cmp(&b.0))
    });
    let ratio = |r: Option<f64>| r.map(python_float_repr).unwrap_or_default();
    let mut out = std::io::stdout().lock();
    writeln!(out, "object\tperson\tman\twoman\tm\tw\tto_m").map_err(stdout_error)?;
    for (object, counts) in rows {
        writeln!(
            out,
            "{object}\t{}\t{}\t{}\t{}\t{}\t{}",
            counts.person,
            counts.man,
            counts.woman,
            ratio(counts.man_to_person()),
            ratio(counts.woman_to_person()),
            ratio(counts.towards_men())
        )
        .map_err(stdout_error)?;
    }
    if let Some(path) = &args.neutral_out {
        let neutral = neutral_pairs(&pairs, &lexicon);
        let mut bytes = Vec::new();
        if neutral.iter().all(|p| p.label.is_some()) && !neutral.is_empty() {
            let rows: Vec<TrainRow> = neutral
                .iter()
                .enumerate()
                .map(|(k, p)| {
                    TrainRow::numbered(k as u64, &p.visual, &p.caption, p.label.unwrap_or(0))
                })
                .collect();
            write_train(&mut bytes, &rows).map_err(|e| Error::io(path, e))?;
        } else {
            write_test(&mut bytes, &neutral).map_err(|e| Error::io(path, e))?;
        }
        std::fs::write(path, bytes).map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}

fn run_search(args: &SearchArgs) -> Result<()> {
    let pairs = read_pairs(&args.input)?;
    let captions: Vec<String> = pairs.iter().map(|p| p.caption.clone()).collect();
    let visuals: Vec<String> = pairs.iter().map(|p| p.visual.clone()).collect();
    let encoder = encoder_for(&captions, &visuals, &args.encoder)?;
    let index = CaptionIndex::new(&encoder.embed(&captions)?)?;
    let mut out = std::io::stdout().lock();
    if let Some(query) = &args.query {
        let vector = encoder.embed(std::slice::from_ref(query))?;
        let vector = vector.first().map(Vec::as_slice).unwrap_or(&[]);
        for (rank, (position, score)) in index.search(vector, args.top)?.into_iter().enumerate() {
            writeln!(
                out,
                "{}\t{}\t{}",
                rank + 1,
                python_float_repr(score),
                captions[position].trim()
            )
            .map_err(stdout_error)?;
        }
        return Ok(());
    }
    // Every distinct visual context is one query; the rows that carry it are relevant.
    let mut relevant: BTreeMap<&str, std::collections::BTreeSet<usize>> = BTreeMap::new();
    for (position, visual) in visuals.iter().enumerate() {
        relevant
            .entry(visual.as_str())
            .or_default()
            .insert(position);
    }
    let queries: Vec<String> = relevant.keys().map(|q| q.to_string()).collect();
    let deepest = args.recall.iter().copied().max().unwrap_or(0);
    let rankings = encoder
        .embed(&queries)?
        .iter()
        .map(|q| Ok(index.search(q, deepest)?.into_iter().map(|h| h.0).collect()))
        .collect::<Result<Vec<Vec<usize>>>>()?;
    let relevant: Vec<_> = relevant.into_values().collect();
    writeln!(out, "queries\t{}", queries.len()).map_err(stdout_error)?;
    writeln!(out, "captions\t{}", index.len()).map_err(stdout_error)?;
    for &k in &args.recall {
        let recall = recall_at_k(&rankings, &relevant, k);
        writeln!(out, "R@{k}\t{}", python_float_repr(recall)).map_err(stdout_error)?;
    }
    Ok(())
}
