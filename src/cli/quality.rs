//! `capflow quality score --fit CORPUS FILE`: fits the built-in quality scorer on a corpus's
//! captions, as an SSA run fits it on the run's captions, and prints the score of each line
//! of FILE.

use std::path::{Path, PathBuf};

use super::out::{outln, status};
use crate::error::{Error, Result};
use crate::export::{read_manifest, read_table};
use crate::ingest::{coco, flickr30k, Row, VecSink};
use crate::schema::{batch_to_rows, CaptionRow, TableKind};
use crate::select::quality::{BuiltinQualityScorer, QualityConfig, QualityScorer};
use crate::text::tokenize::tokenize;

#[derive(Debug, clap::Subcommand)]
pub enum QualityCommand {
    /// Fit the built-in scorer on a corpus's captions and print one score per line of FILE.
    Score(ScoreArgs),
}

#[derive(Debug, clap::Args)]
pub struct ScoreArgs {
    /// Captions to fit the scorer on (repeatable): a capflow dataset directory (its captions
    /// table), a COCO captions or results file (.json), a directory of Flickr30k Entities
    /// `Sentences/*.txt` files, or a text file with one caption per line (Flickr30k Entities
    /// markup is removed).
    #[arg(long = "fit", value_name = "CORPUS", required = true)]
    pub fit: Vec<PathBuf>,
    /// Captions to score, one per line; each line gets one score (an empty line 0).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Print `score<TAB>caption` instead of the score alone.
    #[arg(long)]
    pub with_text: bool,
}

pub fn run(command: QualityCommand) -> Result<()> {
    match command {
        QualityCommand::Score(args) => score(args),
    }
}

fn score(args: ScoreArgs) -> Result<()> {
    let mut captions: Vec<Vec<String>> = Vec::new();
    for corpus in &args.fit {
        captions.extend(corpus_captions(corpus)?.iter().map(|c| tokenize(c)));
    }
    let fitted = captions.iter().filter(|c| !c.is_empty()).count();
    let scorer = BuiltinQualityScorer::train(&captions, &QualityConfig::default())?;
    status!("quality: scorer fitted on {fitted} captions");
    let text = std::fs::read_to_string(&args.file).map_err(|e| Error::io(&args.file, e))?;
    for line in text.lines() {
        let score = scorer.score(&tokenize(line));
        if args.with_text {
            outln!("{score:.4}\t{line}")?;
        } else {
            outln!("{score:.4}")?;
        }
    }
    Ok(())
}

/// The caption texts of one corpus path, in file order.
pub fn corpus_captions(path: &Path) -> Result<Vec<String>> {
    if path.is_dir() {
        if path.join("manifest.json").is_file() {
            return dataset_captions(path);
        }
        return sentence_dir_captions(path);
    }
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    {
        return coco_captions(path);
    }
    line_captions(path)
}

fn dataset_captions(dir: &Path) -> Result<Vec<String>> {
    let manifest = read_manifest(dir)?;
    let mut captions = Vec::new();
    if manifest.table_rows(TableKind::Captions) == 0 {
        return Ok(captions);
    }
    for batch in read_table(dir, TableKind::Captions)? {
        let rows = batch_to_rows::<CaptionRow>(&batch?).map_err(|e| {
            Error::invalid(
                format!("captions table of {}", dir.display()),
                e.to_string(),
            )
        })?;
        captions.extend(rows.into_iter().map(|r| r.text));
    }
    Ok(captions)
}

/// The `*.txt` files of a directory, by name, one caption a line.
fn sentence_dir_captions(dir: &Path) -> Result<Vec<String>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .map(|entry| entry.map(|e| e.path()).map_err(|e| Error::io(dir, e)))
        .collect::<Result<_>>()?;
    files.retain(|p| p.is_file() && p.extension().is_some_and(|e| e == "txt"));
    files.sort();
    if files.is_empty() {
        return Err(Error::invalid(
            dir.display().to_string(),
            "neither a capflow dataset (no manifest.json) nor a directory of caption .txt files",
        ));
    }
    let mut captions = Vec::new();
    for file in files {
        captions.extend(line_captions(&file)?);
    }
    Ok(captions)
}

fn coco_captions(path: &Path) -> Result<Vec<String>> {
    let mut sink = VecSink::default();
    coco::read_captions(path, &mut sink)?;
    if let Some(rejected) = sink.rejected.first() {
        return Err(Error::invalid(
            format!("{} ({})", rejected.source_file, rejected.record),
            format!(
                "{}; a COCO captions file or results list is expected",
                rejected.reason
            ),
        ));
    }
    Ok(sink
        .rows
        .into_iter()
        .filter_map(|row| match row {
            Row::Caption(caption) => Some(caption.text),
            _ => None,
        })
        .collect())
}

/// One caption per non-empty line; Flickr30k Entities markup (`[/EN#1/people A man]`) is
/// removed.
fn line_captions(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let mut captions = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if !line.contains("[/EN#") {
            captions.push(line.to_string());
            continue;
        }
        let marked = flickr30k::parse_caption_markup(line).map_err(|reason| {
            Error::invalid(
                format!("{} line {}", path.display(), number + 1),
                format!("Flickr30k Entities caption markup: {reason}"),
            )
        })?;
        captions.push(marked.tokens.join(" "));
    }
    Ok(captions)
}
