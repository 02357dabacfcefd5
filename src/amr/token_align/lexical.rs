//! Word-level knowledge for the aligner: token lemmas (the WordNet-derived inflection lexicon
//! plus rules for simple pasts, agentive nouns, nominalizations and comparatives), number
//! words, and the fixed words that realize AMR's abstract concepts.

use std::borrow::Cow;

use crate::text::inflect::Lexicon;

/// A token prepared for matching: lower-cased, `@` glue marks removed (`@-@` → `-`).
#[derive(Clone, Debug)]
pub(crate) struct TokenForms {
    pub lower: String,
    /// Candidate lemmas, the lower-cased token first.
    pub lemmas: Vec<String>,
    /// Candidate lemmas of the token without a negative prefix (`unclear` → `clear`).
    pub negated: Vec<String>,
    /// Whether the token is an agentive or result noun (`inhibitor`, `teacher`, `results`)
    /// rather than a verb form, so that the entity it names may share its alignment.
    pub nominal: bool,
    /// Whether the token is a comparative or superlative adjective (`higher`, `best`).
    pub degree: bool,
}

/// Simple pasts that differ from the past participle (the participles are in the lexicon).
const SIMPLE_PASTS: &[(&str, &str)] = &[
    ("was", "be"),
    ("were", "be"),
    ("is", "be"),
    ("are", "be"),
    ("am", "be"),
    ("been", "be"),
    ("has", "have"),
    ("had", "have"),
    ("did", "do"),
    ("does", "do"),
    ("went", "go"),
    ("ran", "run"),
    ("began", "begin"),
    ("came", "come"),
    ("became", "become"),
    ("saw", "see"),
    ("took", "take"),
    ("gave", "give"),
    ("wrote", "write"),
    ("drove", "drive"),
    ("rode", "ride"),
    ("ate", "eat"),
    ("fell", "fall"),
    ("knew", "know"),
    ("grew", "grow"),
    ("drew", "draw"),
    ("flew", "fly"),
    ("threw", "throw"),
    ("spoke", "speak"),
    ("broke", "break"),
    ("chose", "choose"),
    ("froze", "freeze"),
    ("rose", "rise"),
    ("arose", "arise"),
    ("sang", "sing"),
    ("swam", "swim"),
    ("drank", "drink"),
    ("wore", "wear"),
    ("tore", "tear"),
    ("bore", "bear"),
    ("shook", "shake"),
    ("forgot", "forget"),
    ("hid", "hide"),
    ("bit", "bite"),
    ("lay", "lie"),
    ("woke", "wake"),
    ("sank", "sink"),
    ("withdrew", "withdraw"),
    ("overcame", "overcome"),
    ("undertook", "undertake"),
    ("mistook", "mistake"),
    ("led", "lead"),
    ("fed", "feed"),
    ("met", "meet"),
    ("left", "leave"),
    ("felt", "feel"),
    ("kept", "keep"),
    ("slept", "sleep"),
    ("held", "hold"),
    ("told", "tell"),
    ("sold", "sell"),
    ("found", "find"),
    ("bound", "bind"),
    ("brought", "bring"),
    ("thought", "think"),
    ("bought", "buy"),
    ("caught", "catch"),
    ("taught", "teach"),
    ("sought", "seek"),
    ("fought", "fight"),
    ("made", "make"),
    ("said", "say"),
    ("paid", "pay"),
    ("laid", "lay"),
    ("sent", "send"),
    ("spent", "spend"),
    ("built", "build"),
    ("lost", "lose"),
    ("meant", "mean"),
    ("stood", "stand"),
    ("understood", "understand"),
    ("won", "win"),
    ("got", "get"),
    ("sat", "sit"),
    ("shot", "shoot"),
    ("stuck", "stick"),
    ("struck", "strike"),
    ("hung", "hang"),
    ("spun", "spin"),
    ("dug", "dig"),
    ("better", "good"),
    ("best", "good"),
    ("worse", "bad"),
    ("worst", "bad"),
    ("less", "little"),
    ("least", "little"),
    ("lesser", "little"),
    ("fewer", "few"),
    ("more", "much"),
    ("most", "much"),
    ("further", "far"),
    ("farther", "far"),
    ("people", "person"),
    ("men", "man"),
    ("women", "woman"),
    ("children", "child"),
    ("mice", "mouse"),
    ("data", "datum"),
    ("analyses", "analysis"),
    ("hypotheses", "hypothesis"),
];

/// Derivational suffixes detached (with the ending put back) to reach a verb or adjective:
/// agentive nouns (`inhibitor` → `inhibit`), nominalizations (`regulation` → `regulate`),
/// adverbs and comparatives (`higher` → `high`, `bigger` → `big`).
const DERIVATIONS: &[(&str, &str)] = &[
    ("or", ""),
    ("or", "e"),
    ("ors", ""),
    ("ors", "e"),
    ("ers", ""),
    ("ers", "e"),
    ("er", "e"),
    ("ist", ""),
    ("ists", ""),
    ("ation", "e"),
    ("ation", ""),
    ("ations", "e"),
    ("ion", "e"),
    ("ion", ""),
    ("ions", "e"),
    ("ions", ""),
    ("ment", ""),
    ("ments", ""),
    ("ity", ""),
    ("ity", "e"),
    ("ness", ""),
    ("ance", ""),
    ("ence", ""),
    ("ence", "ent"),
    ("ent", ""),
    ("ance", "ant"),
    ("ly", ""),
    ("ally", ""),
    ("ier", "y"),
    ("ied", "y"),
    ("iest", "y"),
    ("est", "e"),
    ("ings", ""),
    ("ings", "e"),
];

const AGENTIVE: &[&str] = &[
    "or", "ors", "er", "ers", "ist", "ists", "ant", "ants", "ent", "ents", "ee", "ees", "ian",
    "ians",
];

const IRREGULAR_DEGREE: &[&str] = &[
    "better", "best", "worse", "worst", "less", "least", "lesser", "fewer", "further", "farther",
    "more", "most",
];

impl TokenForms {
    pub(crate) fn new(token: &str, lexicon: &Lexicon) -> TokenForms {
        let trimmed = token.trim_matches('@');
        let trimmed = if trimmed.is_empty() { token } else { trimmed };
        let lower = trimmed.to_lowercase();
        let lemmas = lemma_candidates(&lower, lexicon);
        let negated = NEGATIVE_PREFIXES
            .iter()
            .filter_map(|p| lower.strip_prefix(p).filter(|rest| rest.len() >= 3))
            .flat_map(|rest| lemma_candidates(rest, lexicon))
            .collect();
        let bytes = lower.as_bytes();
        let nominal = lower.len() > 4
            && (AGENTIVE.iter().any(|s| lower.ends_with(s))
                || lower.ends_with("ings")
                || (!lower.ends_with("ed") && !lower.ends_with("ing")));
        let degree = IRREGULAR_DEGREE.contains(&lower.as_str())
            || (bytes.len() > 4
                && (lower.ends_with("er") || lower.ends_with("est"))
                && !lexicon_is_agent(&lower));
        TokenForms {
            lower,
            lemmas,
            negated,
            nominal,
            degree,
        }
    }

    /// Whether the token without a negative prefix is `lemma`, or starts with it.
    pub(crate) fn has_negated_lemma(&self, lemma: &str) -> bool {
        self.negated
            .iter()
            .any(|l| l == lemma || (lemma.len() >= 4 && l.starts_with(lemma)))
    }

    pub(crate) fn has_lemma(&self, lemma: &str) -> bool {
        self.lemmas.iter().any(|l| l == lemma)
    }
}

/// Lemma candidates of a lower-case word, the word itself first.
fn lemma_candidates(lower: &str, lexicon: &Lexicon) -> Vec<String> {
    let mut lemmas: Vec<String> = Vec::with_capacity(8);
    let add = |lemma: Cow<'_, str>, lemmas: &mut Vec<String>| {
        if !lemma.is_empty() && !lemmas.iter().any(|l| l == lemma.as_ref()) {
            lemmas.push(lemma.into_owned());
        }
    };
    for lemma in lexicon.lemmas(lower) {
        add(lemma, &mut lemmas);
    }
    for (form, lemma) in SIMPLE_PASTS {
        if *form == lower {
            add(Cow::Borrowed(lemma), &mut lemmas);
        }
    }
    for (suffix, ending) in DERIVATIONS {
        if let Some(stem) = lower.strip_suffix(suffix) {
            if stem.len() >= 3 {
                add(Cow::Owned(format!("{stem}{ending}")), &mut lemmas);
            }
        }
    }
    // A doubled consonant before -er/-est/-ing/-ed: `bigger` → `big`, `stopped` → `stop`.
    for suffix in ["er", "est", "ing", "ed"] {
        if let Some(stem) = lower.strip_suffix(suffix) {
            let s = stem.as_bytes();
            if s.len() >= 3 && s[s.len() - 1] == s[s.len() - 2] {
                add(Cow::Borrowed(&stem[..stem.len() - 1]), &mut lemmas);
            }
        }
    }
    lemmas
}

/// `-er` nouns that name agents are not comparatives; the lexicon's person class knows many.
fn lexicon_is_agent(word: &str) -> bool {
    let lex = Lexicon::wordnet();
    lex.is(word, crate::text::inflect::class::PERSON)
        || lex.is(
            word.strip_suffix('s').unwrap_or(word),
            crate::text::inflect::class::PERSON,
        )
}

/// The value of a number word or numeral token (`seven`, `7`, `1,000`, `0.5`).
pub(crate) fn number_value(token: &str) -> Option<f64> {
    const WORDS: &[(&str, f64)] = &[
        ("zero", 0.0),
        ("one", 1.0),
        ("two", 2.0),
        ("three", 3.0),
        ("four", 4.0),
        ("five", 5.0),
        ("six", 6.0),
        ("seven", 7.0),
        ("eight", 8.0),
        ("nine", 9.0),
        ("ten", 10.0),
        ("eleven", 11.0),
        ("twelve", 12.0),
        ("thirteen", 13.0),
        ("fourteen", 14.0),
        ("fifteen", 15.0),
        ("sixteen", 16.0),
        ("seventeen", 17.0),
        ("eighteen", 18.0),
        ("nineteen", 19.0),
        ("twenty", 20.0),
        ("thirty", 30.0),
        ("forty", 40.0),
        ("fifty", 50.0),
        ("sixty", 60.0),
        ("seventy", 70.0),
        ("eighty", 80.0),
        ("ninety", 90.0),
        ("hundred", 100.0),
        ("thousand", 1000.0),
        ("million", 1e6),
        ("billion", 1e9),
        ("dozen", 12.0),
        ("single", 1.0),
        ("both", 2.0),
        ("twice", 2.0),
        ("double", 2.0),
        ("first", 1.0),
        ("second", 2.0),
        ("third", 3.0),
        ("fourth", 4.0),
        ("fifth", 5.0),
        ("half", 0.5),
    ];
    let lower = token.to_lowercase();
    if let Some((_, v)) = WORDS.iter().find(|(w, _)| *w == lower) {
        return Some(*v);
    }
    let digits: String = lower.chars().filter(|c| *c != ',').collect();
    let digits = digits
        .strip_suffix("st")
        .or_else(|| digits.strip_suffix("nd"))
        .or_else(|| digits.strip_suffix("rd"))
        .or_else(|| digits.strip_suffix("th"))
        .unwrap_or(&digits);
    if digits.starts_with(|c: char| c.is_ascii_digit() || c == '.' || c == '-') {
        return digits.parse().ok();
    }
    None
}

/// Month names for `:month` constants of date entities.
pub(crate) fn month_number(token: &str) -> Option<u32> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let lower = token.to_lowercase();
    let lower = lower.trim_end_matches('.');
    if lower.len() < 3 {
        return None;
    }
    MONTHS
        .iter()
        .position(|m| lower.starts_with(m) && (lower.len() == 3 || month_full(lower)))
        .map(|i| i as u32 + 1)
}

fn month_full(word: &str) -> bool {
    matches!(
        word,
        "january"
            | "february"
            | "march"
            | "april"
            | "may"
            | "june"
            | "july"
            | "august"
            | "september"
            | "sept"
            | "october"
            | "november"
            | "december"
    )
}

/// Words that realize a concept whose name is not (a form of) the word: abstract concepts,
/// pronouns, discourse relations and common abbreviations. Matched as whole lower-case tokens.
pub(crate) fn concept_words(stem: &str) -> &'static [&'static str] {
    match stem {
        "and" => &[
            "and",
            "et",
            "moreover",
            "furthermore",
            "plus",
            "also",
            "addition",
            "additionally",
            "&",
        ],
        "or" => &["or", "either", "nor", "and/or"],
        "and-or" => &["and/or", "and", "or"],
        "slash" => &["/", "@/@"],
        "this" => &["this", "these"],
        "that" => &["that", "those"],
        "i" => &["i", "me", "my", "mine", "myself"],
        "we" => &["we", "us", "our", "ours", "ourselves"],
        "you" => &["you", "your", "yours", "yourself"],
        "he" => &["he", "him", "his", "himself"],
        "she" => &["she", "her", "hers", "herself"],
        "it" => &["it", "its", "itself"],
        "they" => &["they", "them", "their", "theirs", "themselves"],
        "possible" => &[
            "can", "could", "may", "might", "able", "possibly", "possible", "cannot", "unable",
            "ca",
        ],
        "obligate" => &["must", "should", "need", "needs", "required", "have"],
        "recommend" => &["should"],
        "contrast" => &["but", "while", "however", "whereas", "contrast", "yet"],
        "have-concession" => &["although", "though", "however", "despite", "even", "still"],
        "cause" => &[
            "because",
            "due",
            "since",
            "thus",
            "therefore",
            "hence",
            "so",
            "why",
            "consequently",
            "as",
        ],
        "protein-segment" => &[
            "site", "sites", "domain", "domains", "motif", "motifs", "region", "regions",
            "residue", "residues", "peptide", "peptides",
        ],
        "affect" => &["effect", "effects", "affect", "affects", "affected"],
        "downregulate" => &["negative", "negatively", "down", "downregulation"],
        "figure" => &["fig", "fig.", "figs", "figs.", "figure", "figures"],
        "percentage-entity" => &["%", "percent", "percentage"],
        "resemble" => &["similar", "similarly", "like", "alike", "resemble"],
        "instead-of" => &["instead", "rather"],
        "counter" => &["anti", "against", "counter"],
        "oppose" => &["against", "anti"],
        "exemplify" => &["example", "e.g.", "e.g", "instance", "such"],
        "amr-unknown" => &[
            "what", "which", "who", "how", "why", "where", "when", "whether",
        ],
        "more" => &["more"],
        "most" => &["most"],
        "less" => &["less", "lower", "fewer"],
        "have-03" | "have" => &["have", "has", "had", "having", "with"],
        "wild-type" => &["wt", "wild-type"],
        "hour" => &["h", "hr", "hrs", "hours", "hour"],
        "minute" => &["min", "mins", "minute", "minutes"],
        "second" => &["s", "sec", "seconds", "second"],
        "micromolar" => &["μm", "um", "µm"],
        "nanomolar" => &["nm"],
        "millimolar" => &["mm"],
        "approximately" => &["approximately", "about", "around", "~", "roughly", "nearly"],
        "less-than" => &["<", "less", "below", "under"],
        "more-than" => &[">", "more", "above", "over", "exceeding"],
        "after" => &["after", "subsequently", "following", "later", "then"],
        "before" => &["before", "prior", "previously", "earlier"],
        "between" => &["between", "among"],
        "up-to" => &["up", "to"],
        "be-located-at" => &["at", "in", "located"],
        "include-91" | "include" => &["including", "include", "includes", "among", "such"],
        "mean" => &["i.e.", "i.e", "namely"],
        "same" => &["same", "identical"],
        "other" => &["other", "another", "others", "al."],
        "multiple" => &["multiple", "several", "many"],
        "many" => &["many", "numerous"],
        "ordinal-entity" | "ordinal" => &[
            "first", "second", "third", "fourth", "fifth", "last", "1st", "2nd", "3rd",
        ],
        _ => &[],
    }
}

/// Tokens that express negation (`:polarity -`).
pub(crate) fn is_negation(lower: &str) -> bool {
    matches!(
        lower,
        "not"
            | "n't"
            | "no"
            | "non"
            | "never"
            | "none"
            | "nor"
            | "neither"
            | "without"
            | "cannot"
            | "unable"
            | "lack"
            | "lacking"
            | "lacks"
            | "absence"
            | "fail"
            | "failed"
            | "fails"
    )
}

/// Negative prefixes whose removal may leave a concept's word (`independent` → `dependent`).
pub(crate) const NEGATIVE_PREFIXES: &[&str] = &["un", "in", "im", "ir", "il", "non", "dis"];

/// Concepts that are never aligned by their name: they stand for structure, not for a word.
pub(crate) fn is_structural(concept: &str) -> bool {
    matches!(
        concept,
        "name"
            | "multi-sentence"
            | "date-entity"
            | "date-interval"
            | "value-interval"
            | "ordinal-entity"
            | "url-entity"
            | "string-entity"
            | "email-address-entity"
            | "phone-number-entity"
            | "score-entity"
    ) || concept.ends_with("-quantity")
}

/// Word-forming prefixes that may stand before a concept's word (`monoubiquitination` for
/// `ubiquitinate-01`, `dephosphorylation` next to `phosphorylate-01`).
pub(crate) const MORPHOLOGICAL_PREFIXES: &[&str] = &[
    "mono", "poly", "auto", "hyper", "hypo", "trans", "over", "under", "co", "re", "de", "di",
];

/// Concepts whose parts should not be matched alone (`amino-acid` is not the word `acid`).
pub(crate) fn allows_partial_match(stem: &str) -> bool {
    let parts: Vec<&str> = stem.split('-').collect();
    parts.len() == 2
        && !matches!(
            parts[0],
            "protein"
                | "amino"
                | "small"
                | "molecular"
                | "nucleic"
                | "have"
                | "macro"
                | "base"
                | "medical"
                | "string"
                | "dna"
                | "rna"
                | "relative"
                | "ratio"
                | "product"
                | "up"
                | "instead"
                | "more"
                | "less"
                | "be"
                | "in"
                | "pull"
        )
}
