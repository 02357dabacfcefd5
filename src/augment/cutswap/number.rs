//! Grammatical number of object nouns: lemma candidates of a plural and the plural of a lemma.
//!
//! CutSwap swaps a singular object only with a singular one and a plural only with a plural, so
//! it has to tell `cars` (plural of `car`) from `bus` (singular) and write `knives`, `children`,
//! `buses`. English noun plurals are regular suffix rules plus a closed list of irregular forms;
//! the rules cannot decide between readings (`horses` → `horse`, `buses` → `bus`), so
//! [`singular_candidates`] returns every reading and the caller keeps the one its vocabulary
//! knows.

/// Singular or plural.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Number {
    Singular,
    Plural,
}

impl Number {
    pub fn name(self) -> &'static str {
        match self {
            Number::Singular => "singular",
            Number::Plural => "plural",
        }
    }
}

/// Irregular (singular, plural) pairs common in image captions.
const IRREGULAR: [(&str, &str); 17] = [
    ("man", "men"),
    ("woman", "women"),
    ("child", "children"),
    ("person", "people"),
    ("foot", "feet"),
    ("tooth", "teeth"),
    ("mouse", "mice"),
    ("goose", "geese"),
    ("ox", "oxen"),
    ("fireman", "firemen"),
    ("policeman", "policemen"),
    ("gentleman", "gentlemen"),
    ("businessman", "businessmen"),
    ("fisherman", "fishermen"),
    ("cattle", "cattle"),
    ("die", "dice"),
    ("cactus", "cacti"),
];

/// Nouns whose singular and plural are the same word; read as singular.
const INVARIANT: [&str; 8] = [
    "sheep", "fish", "deer", "bison", "moose", "salmon", "aircraft", "series",
];

/// Nouns that only exist as plurals.
const PLURALIA_TANTUM: [&str; 14] = [
    "shorts",
    "pants",
    "jeans",
    "trousers",
    "glasses",
    "sunglasses",
    "goggles",
    "scissors",
    "clothes",
    "tongs",
    "pliers",
    "binoculars",
    "overalls",
    "leggings",
];

/// `-o` nouns pluralised with `-es`.
const O_ES: [&str; 6] = ["potato", "tomato", "hero", "echo", "torpedo", "volcano"];

/// `-f`/`-fe` nouns pluralised with `-ves` (singular, plural stem).
const F_VES: [(&str, &str); 11] = [
    ("knife", "knives"),
    ("wife", "wives"),
    ("life", "lives"),
    ("leaf", "leaves"),
    ("loaf", "loaves"),
    ("wolf", "wolves"),
    ("shelf", "shelves"),
    ("half", "halves"),
    ("calf", "calves"),
    ("scarf", "scarves"),
    ("thief", "thieves"),
];

/// Whether `word` is a noun that only exists in the plural (`shorts`, `glasses`).
pub fn is_plurale_tantum(word: &str) -> bool {
    PLURALIA_TANTUM.contains(&word)
}

/// The plural of a singular noun (lower case).
pub fn pluralize(singular: &str) -> String {
    if let Some((_, plural)) = IRREGULAR.iter().find(|(s, _)| *s == singular) {
        return plural.to_string();
    }
    if let Some((_, plural)) = F_VES.iter().find(|(s, _)| *s == singular) {
        return plural.to_string();
    }
    if INVARIANT.contains(&singular) || is_plurale_tantum(singular) {
        return singular.to_string();
    }
    // Compounds inflect their last word: `fire truck` → `fire trucks`.
    if let Some((head, last)) = singular.rsplit_once(' ') {
        return format!("{head} {}", pluralize(last));
    }
    if let Some(stem) = singular.strip_suffix('y') {
        if stem.chars().last().is_some_and(|c| !is_vowel(c)) {
            return format!("{stem}ies");
        }
    }
    let sibilant = ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|end| singular.ends_with(end));
    if sibilant || O_ES.contains(&singular) {
        return format!("{singular}es");
    }
    format!("{singular}s")
}

/// Every singular reading of `word` read as a regular or irregular plural, most likely first.
/// Empty when `word` cannot be a plural (`bus`, `grass`, `man`).
pub fn singular_candidates(word: &str) -> Vec<String> {
    if let Some((head, last)) = word.rsplit_once(' ') {
        return singular_candidates(last)
            .into_iter()
            .map(|s| format!("{head} {s}"))
            .collect();
    }
    if let Some((singular, _)) = IRREGULAR.iter().find(|(_, p)| *p == word) {
        return vec![singular.to_string()];
    }
    if let Some((singular, _)) = F_VES.iter().find(|(_, p)| *p == word) {
        return vec![singular.to_string()];
    }
    if INVARIANT.contains(&word) || word.len() < 3 || !word.ends_with('s') {
        return Vec::new();
    }
    if ["ss", "us", "is"].iter().any(|end| word.ends_with(end)) {
        return Vec::new();
    }
    let mut candidates = Vec::new();
    if let Some(stem) = word.strip_suffix("ies") {
        candidates.push(format!("{stem}y"));
    }
    let es_stem = word.strip_suffix("es");
    // `boxes`, `sandwiches`, `glasses` lose `-es`; `horses`, `shoes`, `cases` lose `-s`, and
    // `buses`, `tomatoes` lose `-es` with a stem that also takes `-s`: try the likelier first.
    let strong_sibilant = es_stem.is_some_and(|stem| {
        ["ss", "x", "z", "ch", "sh"]
            .iter()
            .any(|end| stem.ends_with(end))
    });
    if strong_sibilant {
        candidates.extend(es_stem.map(str::to_string));
    }
    if let Some(stem) = word.strip_suffix('s') {
        candidates.push(stem.to_string());
    }
    if let Some(stem) = es_stem.filter(|_| !strong_sibilant) {
        if stem.ends_with('s') || stem.ends_with('o') {
            candidates.push(stem.to_string());
        }
    }
    candidates
}

/// The lemma and number of a class name or caption noun, without a vocabulary to check against:
/// `trees` → (`tree`, plural), `bus` → (`bus`, singular), `shorts` → (`shorts`, plural).
pub fn lemma_and_number(word: &str) -> (String, Number) {
    if is_plurale_tantum(word) {
        return (word.to_string(), Number::Plural);
    }
    match singular_candidates(word).into_iter().next() {
        Some(singular) => (singular, Number::Plural),
        None => (word.to_string(), Number::Singular),
    }
}

fn is_vowel(c: char) -> bool {
    matches!(c, 'a' | 'e' | 'i' | 'o' | 'u')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_of_common_caption_nouns() {
        let cases = [
            ("dog", "dogs"),
            ("bus", "buses"),
            ("box", "boxes"),
            ("sandwich", "sandwiches"),
            ("lady", "ladies"),
            ("toy", "toys"),
            ("knife", "knives"),
            ("man", "men"),
            ("child", "children"),
            ("person", "people"),
            ("tomato", "tomatoes"),
            ("sheep", "sheep"),
            ("shorts", "shorts"),
            ("fire truck", "fire trucks"),
        ];
        for (singular, plural) in cases {
            assert_eq!(pluralize(singular), plural, "{singular}");
            if singular != plural {
                assert!(
                    singular_candidates(plural).contains(&singular.to_string()),
                    "{plural} should read back as {singular}: {:?}",
                    singular_candidates(plural)
                );
            }
        }
    }

    #[test]
    fn singular_nouns_ending_in_s_are_not_plurals() {
        for word in ["bus", "grass", "glass", "cactus", "tennis", "man", "sheep"] {
            assert!(singular_candidates(word).is_empty(), "{word}");
        }
        assert_eq!(
            lemma_and_number("trees"),
            ("tree".to_string(), Number::Plural)
        );
        assert_eq!(
            lemma_and_number("glasses"),
            ("glasses".to_string(), Number::Plural)
        );
        // `horses` has two readings; the vocabulary decides.
        assert_eq!(singular_candidates("horses"), ["horse", "hors"]);
        assert_eq!(singular_candidates("buses"), ["buse", "bus"]);
    }
}
