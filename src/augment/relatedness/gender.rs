//! Gender co-occurrence with visual context objects, and the gender-neutral rewrite.
//!
//! The paper (Table 6, Eq. 4–5, following Zhao et al. 2017) counts how often each visual context
//! object occurs in a pair whose caption speaks of a man, a woman or a (gender-neutral) person,
//! and reports the bias towards men `count(obj, m) / (count(obj, m) + count(obj, w))` and the
//! ratios to person `count(obj, m) / count(obj, person)` and `count(obj, w) / count(obj, person)`.
//! Here a pair counts once per object and once per gender group it mentions: a caption with a
//! man and a woman counts for both. The gender-neutral rewrite replaces gendered nouns by
//! `person` (singular) or `people` (plural), keeping capitalisation and possessives.

use std::collections::BTreeMap;

/// Gendered and neutral person nouns.
#[derive(Clone, Debug, PartialEq)]
pub struct GenderLexicon {
    pub man: Vec<String>,
    pub woman: Vec<String>,
    pub person: Vec<String>,
    /// Plural forms among `man` and `woman` (rewritten to `people`, the rest to `person`).
    pub plurals: Vec<String>,
}

impl Default for GenderLexicon {
    fn default() -> Self {
        let words = |list: &[&str]| list.iter().map(|w| w.to_string()).collect();
        GenderLexicon {
            man: words(&[
                "man",
                "men",
                "boy",
                "boys",
                "guy",
                "guys",
                "gentleman",
                "gentlemen",
            ]),
            woman: words(&["woman", "women", "girl", "girls", "lady", "ladies"]),
            person: words(&["person", "persons", "people"]),
            plurals: words(&[
                "men",
                "boys",
                "guys",
                "gentlemen",
                "women",
                "girls",
                "ladies",
            ]),
        }
    }
}

/// Which gender groups a text mentions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mentions {
    pub man: bool,
    pub woman: bool,
    pub person: bool,
}

/// The words of a text: maximal runs of letters, lower-cased (`man's` gives `man` and `s`).
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphabetic())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

impl GenderLexicon {
    /// The gender groups `text` mentions.
    pub fn mentions(&self, text: &str) -> Mentions {
        let mut found = Mentions::default();
        for word in words(text) {
            found.man |= self.man.contains(&word);
            found.woman |= self.woman.contains(&word);
            found.person |= self.person.contains(&word);
        }
        found
    }

    /// `text` with every gendered noun replaced by `person`/`people`; `Man` gives `Person`,
    /// `MEN` gives `PEOPLE`, and everything else (spacing, punctuation, `'s`) stays as it was.
    pub fn neutral(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find(char::is_alphabetic) {
            out.push_str(&rest[..start]);
            let word_len = rest[start..]
                .find(|c: char| !c.is_alphabetic())
                .unwrap_or(rest.len() - start);
            let word = &rest[start..start + word_len];
            out.push_str(&self.neutral_word(word));
            rest = &rest[start + word_len..];
        }
        out.push_str(rest);
        out
    }

    fn neutral_word(&self, word: &str) -> String {
        let lower = word.to_lowercase();
        if !self.man.contains(&lower) && !self.woman.contains(&lower) {
            return word.to_string();
        }
        let neutral = if self.plurals.contains(&lower) {
            "people"
        } else {
            "person"
        };
        let mut letters = word.chars();
        let first_upper = letters.next().is_some_and(char::is_uppercase);
        let all_upper = word.chars().count() > 1 && word.chars().all(char::is_uppercase);
        if all_upper {
            neutral.to_uppercase()
        } else if first_upper {
            let mut capitalised = neutral[..1].to_uppercase();
            capitalised.push_str(&neutral[1..]);
            capitalised
        } else {
            neutral.to_string()
        }
    }
}

/// Pairs of one object with each gender group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GenderCounts {
    pub person: u64,
    pub man: u64,
    pub woman: u64,
}

impl GenderCounts {
    /// Bias towards men, `m / (m + w)` (Eq. 4); `None` without gendered pairs.
    pub fn towards_men(&self) -> Option<f64> {
        let gendered = self.man + self.woman;
        (gendered > 0).then(|| self.man as f64 / gendered as f64)
    }

    /// `count(obj, man) / count(obj, person)` (Eq. 5); `None` without person pairs.
    pub fn man_to_person(&self) -> Option<f64> {
        (self.person > 0).then(|| self.man as f64 / self.person as f64)
    }

    /// `count(obj, woman) / count(obj, person)` (Eq. 5); `None` without person pairs.
    pub fn woman_to_person(&self) -> Option<f64> {
        (self.person > 0).then(|| self.woman as f64 / self.person as f64)
    }
}

/// Counts, per object, the pairs whose caption mentions each gender group. `pairs` yields the
/// objects of a pair's visual context and its caption; an object listed twice in one pair
/// counts once.
pub fn gender_cooccurrence<'a, O, I>(
    pairs: I,
    lexicon: &GenderLexicon,
) -> BTreeMap<String, GenderCounts>
where
    O: IntoIterator<Item = &'a str>,
    I: IntoIterator<Item = (O, &'a str)>,
{
    let mut table: BTreeMap<String, GenderCounts> = BTreeMap::new();
    for (objects, caption) in pairs {
        let found = lexicon.mentions(caption);
        if !(found.man || found.woman || found.person) {
            continue;
        }
        let mut objects: Vec<&str> = objects.into_iter().collect();
        objects.sort_unstable();
        objects.dedup();
        for object in objects {
            let counts = table.entry(object.to_string()).or_default();
            counts.man += u64::from(found.man);
            counts.woman += u64::from(found.woman);
            counts.person += u64::from(found.person);
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Truncates to two decimals, as the paper's Table 6 prints ratios.
    fn two_decimals(x: f64) -> f64 {
        (x * 100.0 + 1e-9).floor() / 100.0
    }

    #[test]
    fn ratios_reproduce_the_published_table() {
        // Paper Table 6: object, +person, +man, +woman, m, w, to-m.
        let table = [
            ("clothing", 3950, 3360, 1490, 0.85, 0.37, 0.69),
            ("footwear", 2810, 1720, 220, 0.61, 0.07, 0.88),
            ("racket", 1360, 440, 150, 0.32, 0.11, 0.74),
            ("surfboard", 820, 80, 10, 0.09, 0.01, 0.88),
            ("tennis", 140, 200, 60, 1.42, 0.42, 0.76),
            ("motorcycle", 480, 40, 20, 0.08, 0.04, 0.66),
            ("car", 360, 120, 30, 0.33, 0.08, 0.80),
            ("jeans", 50, 240, 70, 4.8, 1.4, 0.77),
            ("glasses", 50, 90, 60, 1.8, 1.2, 0.60),
        ];
        for (object, person, man, woman, m, w, to_m) in table {
            let counts = GenderCounts { person, man, woman };
            let got = |r: Option<f64>| two_decimals(r.expect("counts present"));
            assert_eq!(got(counts.man_to_person()), m, "{object} m");
            assert_eq!(got(counts.woman_to_person()), w, "{object} w");
            assert_eq!(got(counts.towards_men()), to_m, "{object} to-m");
        }
    }

    #[test]
    fn counts_match_a_hand_count() {
        let lexicon = GenderLexicon::default();
        let pairs: Vec<(Vec<&str>, &str)> = vec![
            (
                vec!["surfboard", "wave"],
                "a man riding a surfboard on a wave",
            ),
            (vec!["surfboard"], "A woman carries her surfboard."),
            (
                vec!["surfboard", "surfboard"],
                "two men and a girl with surfboards",
            ),
            (vec!["surfboard", "wave"], "a person surfing a wave"),
            (vec!["wave"], "a big wave"),
            (vec!["racket"], "the man's racket and some people"),
        ];
        let table =
            gender_cooccurrence(pairs.iter().map(|(o, c)| (o.iter().copied(), *c)), &lexicon);
        // surfboard: man in pairs 1 and 3, woman in 2 and 3, person in 4.
        assert_eq!(
            table["surfboard"],
            GenderCounts {
                person: 1,
                man: 2,
                woman: 2
            }
        );
        assert_eq!(
            table["wave"],
            GenderCounts {
                person: 1,
                man: 1,
                woman: 0
            }
        );
        assert_eq!(
            table["racket"],
            GenderCounts {
                person: 1,
                man: 1,
                woman: 0
            }
        );
        assert_eq!(table["surfboard"].towards_men(), Some(0.5));
        assert_eq!(table["surfboard"].man_to_person(), Some(2.0));
        assert_eq!(GenderCounts::default().towards_men(), None);
    }

    #[test]
    fn neutral_rewrite_keeps_form() {
        let lexicon = GenderLexicon::default();
        assert_eq!(
            lexicon.neutral("A woman is putting makeup on another woman in a chair."),
            "A person is putting makeup on another person in a chair."
        );
        assert_eq!(
            lexicon.neutral("Men and WOMEN; the man's dog, a Boy  (and a manhole)"),
            "People and PEOPLE; the person's dog, a Person  (and a manhole)"
        );
        assert_eq!(lexicon.neutral(""), "");
    }
}
