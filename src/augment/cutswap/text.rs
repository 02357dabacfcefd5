//! Text swaps: one object (and its attributes) of a caption replaced by a member of the nearest
//! object cluster with an attribute seen with that member (thesis §3.2.2).

use std::ops::Range;

use rand::seq::SliceRandom;
use rand::Rng;

use super::caption::{self, Mention, Token};
use super::clusters::nearest_centre;
use super::number::Number;
use super::Model;
use crate::amr::sample::predicate_rng;
use crate::augment::ImageAnnotations;
use crate::schema::{CaptionRow, GroundingRow};

/// Stage name of the text swap's random streams.
pub const TEXT_STAGE: &str = "cutswap-text";

/// One swapped caption and what was swapped.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TextSwap {
    pub caption_id: String,
    /// Index of this swap among the caption's swaps.
    pub index: usize,
    pub source_text: String,
    pub text: String,
    pub number: Number,
    pub from_lemma: String,
    /// The object words as written in the source caption.
    pub from_object: String,
    pub from_attributes: Vec<String>,
    pub to_lemma: String,
    pub to_object: String,
    /// The attribute written before the new object (`None`: no attribute could be placed).
    pub to_attribute: Option<String>,
    /// The cluster the new object was drawn from (the one nearest the old object).
    pub cluster: usize,
    /// Byte range of the source caption that was replaced (attributes and object).
    pub replaced: Range<usize>,
    pub replacement: String,
    /// Whether the article before the phrase changed (`a` ↔ `an`).
    pub article_changed: bool,
    /// Index (in the caption's groundings) of the grounded phrase the object heads.
    #[serde(skip)]
    pub grounding: Option<usize>,
}

/// A caption's tokens and object mentions in the model's vocabulary.
pub(super) struct ReadCaption<'a> {
    pub row: &'a CaptionRow,
    pub tokens: Vec<Token>,
    pub groundings: Vec<&'a GroundingRow>,
    pub mentions: Vec<Mention>,
}

impl Model {
    /// Reads a caption: tokens, its groundings, object mentions.
    pub(super) fn read_caption<'a>(
        &self,
        image: &'a ImageAnnotations,
        row: &'a CaptionRow,
    ) -> ReadCaption<'a> {
        let tokens = caption::tokens(&row.text);
        let groundings = caption_groundings(image, row);
        let mentions = caption::mentions(&tokens, &groundings, &self.vocabulary, |w| {
            self.is_attribute(w)
        });
        ReadCaption {
            row,
            tokens,
            groundings,
            mentions,
        }
    }

    /// The text swaps of every caption of `image`, in caption order.
    pub fn text_swaps(&self, image: &ImageAnnotations, seed: u64) -> Vec<TextSwap> {
        let mut out = Vec::new();
        for row in &image.captions {
            let read = self.read_caption(image, row);
            out.extend(self.caption_swaps(&image.image_id, &read, seed));
        }
        out
    }

    /// Up to `swaps_per_caption` distinct swaps of one caption.
    pub(super) fn caption_swaps(
        &self,
        image_id: &str,
        read: &ReadCaption<'_>,
        seed: u64,
    ) -> Vec<TextSwap> {
        let swappable: Vec<&Mention> = read
            .mentions
            .iter()
            .filter(|m| self.lemma_index.contains_key(&m.lemma))
            .collect();
        let wanted = self.config.swaps_per_caption;
        if swappable.is_empty() || wanted == 0 {
            return Vec::new();
        }
        let mut rng = predicate_rng(seed, image_id, TEXT_STAGE, &read.row.caption_id);
        let mut swaps: Vec<TextSwap> = Vec::new();
        // Draws that repeat an earlier caption are retried a bounded number of times.
        for _ in 0..wanted * 4 {
            if swaps.len() == wanted {
                break;
            }
            let mention = swappable[rng.gen_range(0..swappable.len())];
            let Some(mut swap) = self.swap_mention(read, mention, &mut rng) else {
                continue;
            };
            if swaps.iter().all(|s| s.text != swap.text) {
                swap.index = swaps.len();
                swaps.push(swap);
            }
        }
        swaps
    }

    /// One random swap of `mention`, or `None` when no member of its cluster can change it.
    fn swap_mention(
        &self,
        read: &ReadCaption<'_>,
        mention: &Mention,
        rng: &mut impl Rng,
    ) -> Option<TextSwap> {
        let tokens = &read.tokens;
        let from_object = join_norms(&tokens[mention.object.clone()]);
        let place_attribute = !mention.attributes.is_empty()
            || (self.config.insert_attribute && mention.accepts_inserted_attribute(tokens));
        let cluster = nearest_centre(
            &self.clusters.centres,
            &self.vectors[*self.lemma_index.get(&mention.lemma)?],
        )?;
        // (member, its surface form, the attributes that make a change)
        let mut options: Vec<(&str, String, Vec<Option<&str>>)> = Vec::new();
        for &member in &self.clusters.members[cluster] {
            let lemma = self.lemmas[member].as_str();
            let Some(surface) = self.surface_form(lemma, mention.number) else {
                continue;
            };
            let attributes = self.attributes.attributes_of(lemma);
            if attributes.is_empty() {
                continue;
            }
            let same_object = surface == from_object;
            let choices: Vec<Option<&str>> = if place_attribute {
                attributes
                    .into_iter()
                    .filter(|a| !(same_object && mention.attribute_words == [*a]))
                    .map(Some)
                    .collect()
            } else if same_object {
                Vec::new()
            } else {
                vec![None]
            };
            if !choices.is_empty() {
                options.push((lemma, surface, choices));
            }
        }
        let (to_lemma, to_object, choices) = options.choose(rng)?;
        let to_attribute = *choices.choose(rng)?;
        let replaced_tokens =
            mention.attributes.start.min(mention.object.start)..mention.object.end;
        let replaced =
            tokens[replaced_tokens.start].span.start..tokens[replaced_tokens.end - 1].span.end;
        let source = &read.row.text;
        let mut words: Vec<&str> = to_attribute.into_iter().collect();
        words.extend(to_object.split(' '));
        let mut replacement = words.join(" ");
        if source[replaced.clone()].starts_with(|c: char| c.is_uppercase()) {
            replacement = capitalize(&replacement);
        }
        let mut text = format!(
            "{}{}{}",
            &source[..replaced.start],
            replacement,
            &source[replaced.end..]
        );
        let mut article_changed = false;
        if self.config.fix_articles && replaced_tokens.start > 0 {
            let article = &tokens[replaced_tokens.start - 1];
            if let Some(fixed) = agreeing_article(&source[article.span.clone()], &replacement) {
                text = format!(
                    "{}{}{}",
                    &text[..article.span.start],
                    fixed,
                    &text[article.span.end..]
                );
                article_changed = true;
            }
        }
        Some(TextSwap {
            caption_id: read.row.caption_id.clone(),
            index: 0,
            source_text: source.clone(),
            text,
            number: mention.number,
            from_lemma: mention.lemma.clone(),
            from_object,
            from_attributes: mention.attribute_words.clone(),
            to_lemma: to_lemma.to_string(),
            to_object: to_object.clone(),
            to_attribute: to_attribute.map(str::to_string),
            cluster,
            replaced,
            replacement,
            article_changed,
            grounding: mention.grounding,
        })
    }

    /// The form of `lemma` in `number`: the most frequent one seen in captions, else the lemma
    /// itself (singular) or its regular plural (when `inflect_plurals`).
    pub fn surface_form(&self, lemma: &str, number: Number) -> Option<String> {
        let seen = self.forms.get(lemma).and_then(|f| f.most_frequent(number));
        if let Some(form) = seen {
            return Some(form.to_string());
        }
        let tantum = super::number::is_plurale_tantum(lemma);
        match number {
            Number::Singular if !tantum => Some(lemma.to_string()),
            Number::Plural if tantum => Some(lemma.to_string()),
            Number::Plural if self.config.inflect_plurals => Some(super::number::pluralize(lemma)),
            _ => None,
        }
    }
}

/// The grounding rows of `image` that belong to caption `row`.
pub(super) fn caption_groundings<'a>(
    image: &'a ImageAnnotations,
    row: &CaptionRow,
) -> Vec<&'a GroundingRow> {
    image
        .groundings
        .iter()
        .filter(|g| g.caption_id == row.caption_id)
        .collect()
}

fn join_norms(tokens: &[Token]) -> String {
    tokens
        .iter()
        .map(|t| t.norm.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The article `a`/`an` (case kept) that agrees with `next`, when `article` is the other one.
fn agreeing_article(article: &str, next: &str) -> Option<String> {
    let lower = article.to_lowercase();
    if lower != "a" && lower != "an" {
        return None;
    }
    let wanted = if takes_an(&next.to_lowercase()) {
        "an"
    } else {
        "a"
    };
    if lower == wanted {
        return None;
    }
    let upper = article.starts_with(|c: char| c.is_uppercase());
    Some(if upper {
        capitalize(wanted)
    } else {
        wanted.to_string()
    })
}

/// Whether a word is read with a vowel sound first (spelling heuristic with the common
/// exceptions: `a unicorn`, `a one-way`, `an hour`).
fn takes_an(word: &str) -> bool {
    const VOWEL_SOUND: [&str; 4] = ["hour", "honest", "honor", "heir"];
    const CONSONANT_SOUND: [&str; 6] = ["uni", "use", "usu", "eu", "one", "ewe"];
    if VOWEL_SOUND.iter().any(|p| word.starts_with(p)) {
        return true;
    }
    if CONSONANT_SOUND.iter().any(|p| word.starts_with(p)) {
        return false;
    }
    word.starts_with(['a', 'e', 'i', 'o', 'u'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn articles_agree_with_the_next_word() {
        assert_eq!(agreeing_article("a", "orange cat"), Some("an".to_string()));
        assert_eq!(agreeing_article("An", "red apple"), Some("A".to_string()));
        assert_eq!(agreeing_article("a", "red apple"), None);
        assert_eq!(agreeing_article("a", "umbrella"), Some("an".to_string()));
        assert_eq!(agreeing_article("an", "unicorn"), Some("a".to_string()));
        assert_eq!(agreeing_article("the", "apple"), None);
    }
}
