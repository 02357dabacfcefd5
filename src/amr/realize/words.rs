//! Closed-class English the realizer needs besides the WordNet lexicon: prepositions for
//! roles and frames, pronouns, determiners, number words.
//!
//! These are small, hand-written tables of function words and of the handful of PropBank
//! frames whose oblique arguments take a fixed preposition in captions; everything
//! open-class (inflection, word classes) comes from `crate::text::inflect`.

/// How a frame's numbered argument is realized when it is not the subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ArgForm {
    /// A direct object right after the verb.
    Object,
    /// A prepositional phrase.
    Prep(&'static str),
}

/// Frame-specific argument realizations: (frame, argument number, form).
const FRAME_ARGS: &[(&str, u8, ArgForm)] = &[
    ("attach-01", 2, ArgForm::Prep("to")),
    ("buy-01", 2, ArgForm::Prep("from")),
    ("carry-01", 2, ArgForm::Prep("to")),
    ("cover-01", 2, ArgForm::Prep("with")),
    ("dress-01", 2, ArgForm::Prep("in")),
    ("fill-01", 2, ArgForm::Prep("with")),
    ("give-01", 2, ArgForm::Prep("to")),
    ("hand-01", 2, ArgForm::Prep("to")),
    ("lean-01", 2, ArgForm::Prep("against")),
    ("lie-07", 2, ArgForm::Prep("on")),
    ("listen-01", 1, ArgForm::Prep("to")),
    ("look-01", 1, ArgForm::Prep("at")),
    ("look-01", 2, ArgForm::Prep("at")),
    ("place-01", 2, ArgForm::Prep("in")),
    ("play-01", 3, ArgForm::Prep("with")),
    ("play-11", 2, ArgForm::Object),
    ("point-01", 2, ArgForm::Prep("at")),
    ("pose-01", 2, ArgForm::Prep("for")),
    ("put-01", 2, ArgForm::Prep("into")),
    ("rest-01", 2, ArgForm::Prep("on")),
    ("sell-01", 2, ArgForm::Prep("to")),
    ("sit-01", 2, ArgForm::Prep("on")),
    ("smile-01", 2, ArgForm::Prep("at")),
    ("stand-01", 2, ArgForm::Prep("at")),
    ("stare-01", 1, ArgForm::Prep("at")),
    ("talk-01", 1, ArgForm::Prep("about")),
    ("talk-01", 2, ArgForm::Prep("to")),
    ("throw-01", 2, ArgForm::Prep("to")),
    ("wait-01", 2, ArgForm::Prep("for")),
    ("walk-01", 2, ArgForm::Prep("to")),
    ("wave-01", 2, ArgForm::Prep("at")),
];

/// The frame table's entry for argument `arg` of `frame`.
pub(super) fn frame_arg_form(frame: &str, arg: u8) -> Option<ArgForm> {
    FRAME_ARGS
        .iter()
        .find(|(f, a, _)| *f == frame && *a == arg)
        .map(|&(_, _, form)| form)
}

/// How argument `arg` of `frame` is realized when it is not the subject: the frame table,
/// else the object for `ARG1` and PropBank's usual reading of the higher arguments
/// (`ARG2` recipient/attribute "to", `ARG3` start point "from", `ARG4` end point "to").
pub(super) fn arg_form(frame: &str, arg: u8) -> ArgForm {
    if let Some(form) = frame_arg_form(frame, arg) {
        return form;
    }
    match arg {
        0 | 1 => ArgForm::Object,
        2 | 4 => ArgForm::Prep("to"),
        3 => ArgForm::Prep("from"),
        _ => ArgForm::Prep("with"),
    }
}

/// The preposition a non-core role takes before a noun phrase.
pub(super) fn role_preposition(role: &str) -> &'static str {
    match role {
        "path" => "through",
        "direction" => "toward",
        "destination" => "to",
        "source" => "from",
        "instrument" | "accompanier" | "manner" | "part" | "poss-of" => "with",
        "beneficiary" | "purpose" | "duration" => "for",
        "time" => "during",
        "topic" => "about",
        "cause" => "because of",
        "medium" => "in",
        "consist-of" | "part-of" | "poss" => "of",
        "example" => "such as",
        "extent" => "over",
        _ => "with",
    }
}

/// Nouns that take "on" or "at" as a location; everything else takes "in".
pub(super) fn location_preposition(noun: &str) -> &'static str {
    const ON: &[&str] = &[
        "beach",
        "bed",
        "bench",
        "bicycle",
        "bike",
        "blanket",
        "board",
        "boardwalk",
        "bridge",
        "carpet",
        "chair",
        "couch",
        "court",
        "deck",
        "dock",
        "field",
        "floor",
        "grass",
        "ground",
        "hill",
        "horse",
        "lake",
        "lawn",
        "ledge",
        "mat",
        "motorcycle",
        "mountain",
        "path",
        "pier",
        "platform",
        "ramp",
        "road",
        "rock",
        "roof",
        "sand",
        "scooter",
        "seat",
        "shore",
        "sidewalk",
        "skateboard",
        "slope",
        "snow",
        "sofa",
        "stage",
        "step",
        "stairs",
        "street",
        "surfboard",
        "swing",
        "table",
        "track",
        "trail",
        "wall",
        "wave",
    ];
    const AT: &[&str] = &[
        "counter",
        "desk",
        "door",
        "entrance",
        "event",
        "intersection",
        "party",
        "station",
        "stop",
        "window",
    ];
    if ON.contains(&noun) {
        "on"
    } else if AT.contains(&noun) {
        "at"
    } else {
        "in"
    }
}

/// Concepts that are prepositions: their `:op1` is the object (`(a / above :op1 (s / sand))`).
pub(super) fn spatial_preposition(concept: &str) -> Option<&'static str> {
    Some(match concept {
        "above" => "above",
        "across" => "across",
        "across-from" => "across from",
        "after" => "after",
        "against" => "against",
        "along" => "along",
        "among" => "among",
        "around" => "around",
        "at" => "at",
        "before" => "before",
        "behind" => "behind",
        "below" => "below",
        "beneath" => "beneath",
        "beside" => "beside",
        "between" => "between",
        "beyond" => "beyond",
        "by" => "by",
        "down" => "down",
        "in" => "in",
        "in-front-of" | "front" => "in front of",
        "inside" => "inside",
        "into" => "into",
        "near" => "near",
        "nearby" => "nearby",
        "next-to" => "next to",
        "off" => "off",
        "on" => "on",
        "on-top-of" => "on top of",
        "onto" => "onto",
        "opposite" => "opposite",
        "out" => "out",
        "outside" => "outside",
        "over" => "over",
        "past" => "past",
        "through" => "through",
        "throughout" => "throughout",
        "toward" | "towards" => "toward",
        "under" => "under",
        "underneath" => "underneath",
        "up" => "up",
        "upon" => "upon",
        "within" => "within",
        _ => return None,
    })
}

/// Predicates that read as a preposition between `:ARG1` and `:ARG2` (`near-02`).
pub(super) fn prepositional_predicate(lemma: &str) -> Option<&'static str> {
    Some(match lemma {
        "near" => "near",
        "close" => "close to",
        "far" => "far from",
        "inside" => "inside",
        "outside" => "outside",
        _ => return None,
    })
}

/// Words that are adverbs as they stand, so `:manner` does not add -ly.
pub(super) fn is_adverb(word: &str) -> bool {
    const ADVERBS: &[&str] = &[
        "again",
        "alone",
        "around",
        "away",
        "back",
        "back-and-forth",
        "down",
        "downstairs",
        "early",
        "far",
        "fast",
        "forward",
        "hard",
        "here",
        "home",
        "inside",
        "late",
        "nearby",
        "outdoors",
        "outside",
        "overhead",
        "side-by-side",
        "still",
        "there",
        "together",
        "up",
        "upstairs",
        "well",
    ];
    word.ends_with("ly") || ADVERBS.contains(&word)
}

/// A `:mod` concept that is a determiner rather than an adjective.
pub(super) fn determiner(concept: &str) -> Option<&'static str> {
    Some(match concept {
        "this" => "this",
        "that" => "that",
        "these" => "these",
        "those" => "those",
        "other" => "the other",
        "another" => "another",
        "some" => "some",
        "any" => "any",
        "each" => "each",
        "every" => "every",
        "all" => "all",
        "both" => "both",
        "many" => "many",
        "several" => "several",
        "few" => "a few",
        "no" => "no",
        _ => return None,
    })
}

/// Whether a determiner makes its noun plural.
pub(super) fn plural_determiner(word: &str) -> bool {
    matches!(
        word,
        "these" | "those" | "some" | "all" | "both" | "many" | "several" | "a few"
    )
}

/// The English number words from zero to twenty, by value.
pub(crate) const NUMBER_WORDS: [&str; 21] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
];

/// English number words for small cardinals; larger numbers stay digits.
pub(super) fn number_word(n: u64) -> Option<&'static str> {
    NUMBER_WORDS.get(usize::try_from(n).ok()?).copied()
}

/// Grammatical gender of a person noun, for possessive pronouns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gender {
    Male,
    Female,
    /// A person of unknown gender: "their".
    Person,
    /// Animals and things: "its".
    Thing,
}

pub(super) fn gender_of(noun: &str) -> Option<Gender> {
    const MALE: &[&str] = &[
        "boy",
        "brother",
        "cowboy",
        "father",
        "gentleman",
        "guy",
        "he",
        "husband",
        "king",
        "man",
        "son",
        "uncle",
        "dad",
        "grandfather",
        "businessman",
        "fisherman",
        "policeman",
    ];
    const FEMALE: &[&str] = &[
        "aunt",
        "bride",
        "daughter",
        "girl",
        "grandmother",
        "lady",
        "mother",
        "mom",
        "queen",
        "she",
        "sister",
        "wife",
        "woman",
        "businesswoman",
        "policewoman",
    ];
    if MALE.contains(&noun) {
        Some(Gender::Male)
    } else if FEMALE.contains(&noun) {
        Some(Gender::Female)
    } else {
        None
    }
}

/// Personal pronoun concepts: (subject, object, possessive determiner, plural).
pub(super) fn pronoun(concept: &str) -> Option<(&'static str, &'static str, &'static str, bool)> {
    Some(match concept {
        "i" => ("I", "me", "my", false),
        "you" => ("you", "you", "your", false),
        "he" => ("he", "him", "his", false),
        "she" => ("she", "her", "her", false),
        "it" => ("it", "it", "its", false),
        "we" => ("we", "us", "our", true),
        "they" => ("they", "them", "their", true),
        "someone" | "somebody" => ("someone", "someone", "someone 's", false),
        "something" => ("something", "something", "its", false),
        "everyone" | "everybody" => ("everyone", "everyone", "everyone 's", false),
        _ => return None,
    })
}

/// Nouns that are plural as they stand (`shorts`, `glasses`, `jeans`): a final -s that is
/// not part of a singular ending (`bus`, `dress`, `canvas`, `tennis`, `chaos`).
pub(super) fn plural_only(noun: &str) -> bool {
    noun.len() > 3
        && noun.ends_with('s')
        && !["ss", "us", "is", "as", "os", "ys"]
            .iter()
            .any(|e| noun.ends_with(e))
}
