//! Closed word classes of caption English and what AMR makes of them.

pub const DETERMINERS: &[&str] = &[
    "a", "an", "the", "this", "these", "those", "each", "every", "another", "some", "any", "both",
    "either", "neither",
];

/// Possessive pronouns with the personal pronoun AMR writes for them.
pub const POSSESSIVES: &[(&str, &str)] = &[
    ("his", "he"),
    ("her", "she"),
    ("its", "it"),
    ("their", "they"),
    ("my", "i"),
    ("your", "you"),
    ("our", "we"),
];

/// Personal pronouns (object forms too) with their AMR concept.
pub const PRONOUNS: &[(&str, &str)] = &[
    ("i", "i"),
    ("me", "i"),
    ("you", "you"),
    ("he", "he"),
    ("him", "he"),
    ("she", "she"),
    ("it", "it"),
    ("we", "we"),
    ("us", "we"),
    ("they", "they"),
    ("them", "they"),
    ("someone", "someone"),
    ("somebody", "somebody"),
    ("something", "something"),
    ("everyone", "everyone"),
    ("everybody", "everybody"),
    ("everything", "everything"),
    ("anyone", "anyone"),
    ("nobody", "nobody"),
    ("nothing", "nothing"),
];

pub const BE: &[&str] = &[
    "is", "are", "was", "were", "be", "been", "being", "am", "'s", "'re", "'m",
];

pub const PREPOSITIONS: &[&str] = &[
    "in",
    "on",
    "at",
    "with",
    "near",
    "by",
    "under",
    "over",
    "above",
    "below",
    "behind",
    "beside",
    "across",
    "through",
    "along",
    "down",
    "up",
    "into",
    "onto",
    "toward",
    "towards",
    "past",
    "around",
    "from",
    "for",
    "of",
    "to",
    "during",
    "inside",
    "outside",
    "off",
    "against",
    "after",
    "before",
    "among",
    "between",
    "atop",
    "beneath",
    "underneath",
    "without",
    "upon",
    "within",
    "like",
    "beyond",
    "throughout",
    "next",
    "about",
];

/// Subordinating conjunctions and the role of their clause.
pub const SUBORDINATORS: &[(&str, &str)] = &[
    ("while", ":time"),
    ("as", ":time"),
    ("when", ":time"),
    ("whilst", ":time"),
    ("because", ":cause"),
    ("since", ":cause"),
    ("until", ":time"),
    ("so", ":purpose"),
];

pub const RELATIVES: &[&str] = &["that", "who", "which", "whose", "where"];

/// Adverbs that are no adjective + `-ly`, with the role AMR gives them.
pub const ADVERBS: &[(&str, &str)] = &[
    ("together", ":manner"),
    ("nearby", ":location"),
    ("outside", ":location"),
    ("outdoors", ":location"),
    ("inside", ":location"),
    ("indoors", ":location"),
    ("here", ":location"),
    ("there", ":location"),
    ("away", ":direction"),
    ("back", ":direction"),
    ("up", ":direction"),
    ("down", ":direction"),
    ("out", ":direction"),
    ("off", ":direction"),
    ("around", ":direction"),
    ("forward", ":direction"),
    ("again", ":mod"),
    ("also", ":mod"),
    ("too", ":mod"),
    ("still", ":mod"),
    ("just", ":mod"),
    ("now", ":time"),
    ("today", ":time"),
    ("very", ":degree"),
    ("so", ":degree"),
    ("really", ":degree"),
];

/// Nouns AMR writes as a role of a person: `(p / person :ARG0-of (h / have-rel-role-91
/// :ARG2 (f / friend)))`; the second list only when a possessor is named ("her children").
pub const RELATIONS: &[&str] = &[
    "friend",
    "partner",
    "parent",
    "mother",
    "father",
    "brother",
    "sister",
    "wife",
    "husband",
    "son",
    "daughter",
    "grandmother",
    "grandfather",
    "grandparent",
    "cousin",
    "uncle",
    "aunt",
    "boyfriend",
    "girlfriend",
    "sibling",
    "mom",
    "dad",
    "grandson",
    "granddaughter",
    "teammate",
    "neighbor",
    "classmate",
];
pub const POSSESSED_RELATIONS: &[&str] = &["child", "kid", "baby"];

/// Nouns whose `of` names what they are made of or hold (`a group of children`).
pub const CONTAINERS: &[&str] = &[
    "group",
    "bunch",
    "row",
    "pile",
    "stack",
    "pair",
    "couple",
    "herd",
    "flock",
    "team",
    "crowd",
    "line",
    "set",
    "family",
    "lot",
    "variety",
    "plate",
    "bowl",
    "cup",
    "glass",
    "box",
    "basket",
    "bag",
    "slice",
    "piece",
    "bottle",
    "mug",
    "tray",
    "pack",
    "collection",
    "number",
    "handful",
    "bouquet",
    "school",
    "swarm",
    "gaggle",
    "litter",
    "pod",
];

/// Nouns whose `of` names the whole they are part of (`the top of a hill`).
pub const PARTS: &[&str] = &[
    "side", "edge", "top", "bottom", "front", "back", "middle", "end", "corner", "part", "surface",
    "center", "centre", "rest", "half", "base", "tip", "shore", "bank", "inside", "outside",
];

/// Nouns whose `of` names what they show (`a picture of a dog`).
pub const DEPICTIONS: &[&str] = &[
    "picture",
    "photo",
    "photograph",
    "image",
    "view",
    "painting",
    "drawing",
    "poster",
    "sign",
    "statue",
    "map",
    "book",
    "story",
    "close-up",
    "closeup",
];

/// Words for materials: a noun or adjective of one is `:consist-of` (`wooden fence`, `brick
/// oven`).
pub const MATERIALS: &[(&str, &str)] = &[
    ("wooden", "wood"),
    ("wood", "wood"),
    ("brick", "brick"),
    ("stone", "stone"),
    ("rock", "rock"),
    ("metal", "metal"),
    ("metallic", "metal"),
    ("steel", "steel"),
    ("plastic", "plastic"),
    ("glass", "glass"),
    ("leather", "leather"),
    ("concrete", "concrete"),
    ("marble", "marble"),
    ("golden", "gold"),
    ("silver", "silver"),
    ("woolen", "wool"),
    ("wool", "wool"),
    ("cotton", "cotton"),
    ("paper", "paper"),
    ("straw", "straw"),
];

/// Nouns of time: `on a sunny afternoon` is `:time`.
pub const TIMES: &[&str] = &[
    "morning",
    "afternoon",
    "evening",
    "night",
    "day",
    "sunset",
    "sunrise",
    "dusk",
    "dawn",
    "weekend",
    "winter",
    "summer",
    "spring",
    "autumn",
    "fall",
    "noon",
    "midnight",
    "daytime",
    "nighttime",
    "time",
    "moment",
    "game",
    "match",
    "race",
    "party",
    "wedding",
    "festival",
    "concert",
    "ceremony",
    "holiday",
    "vacation",
    "lunch",
    "dinner",
    "breakfast",
];

/// Quantity words that are no numbers: `:quant (s / several)`.
pub const QUANTIFIERS: &[&str] = &["several", "many", "few", "numerous", "multiple", "various"];

/// Verbs whose `to` infinitive is their `:ARG1` rather than a purpose.
pub const CONTROL_VERBS: &[&str] = &[
    "try", "want", "like", "love", "begin", "start", "need", "attempt", "learn", "hope", "plan",
    "decide", "seem", "continue", "refuse", "prefer", "hate", "forget", "manage", "wish",
    "prepare", "have", "get",
];

/// Auxiliaries and modals, read past before the verb.
pub const AUXILIARIES: &[&str] = &[
    "does", "do", "did", "can", "could", "will", "would", "shall", "should", "may", "might", "must",
];

/// Verbs that report speech: `" ... , " said the fox`.
pub const REPORTING: &[&str] = &[
    "say", "ask", "reply", "answer", "add", "cry", "exclaim", "continue", "declare", "repeat",
    "respond", "shout", "whisper", "murmur", "think", "demand", "explain", "retort", "insist",
];

/// Units of a `temporal-quantity`.
pub const TIME_UNITS: &[&str] = &[
    "second", "minute", "hour", "day", "week", "month", "year", "century",
];

pub fn number(word: &str) -> Option<u32> {
    const TENS: &[(&str, u32)] = &[
        ("thirty", 30),
        ("forty", 40),
        ("fifty", 50),
        ("sixty", 60),
        ("seventy", 70),
        ("eighty", 80),
        ("ninety", 90),
        ("hundred", 100),
        ("thousand", 1000),
        ("million", 1_000_000),
    ];
    if let Some(n) = crate::amr::realize::NUMBER_WORDS
        .iter()
        .position(|w| *w == word)
    {
        return u32::try_from(n).ok();
    }
    if let Some((_, n)) = TENS.iter().find(|(w, _)| *w == word) {
        return Some(*n);
    }
    if !word.is_empty() && word.len() <= 9 && word.bytes().all(|b| b.is_ascii_digit()) {
        return word.parse().ok();
    }
    None
}

pub fn lookup<'a>(table: &[(&str, &'a str)], word: &str) -> Option<&'a str> {
    table.iter().find(|(w, _)| *w == word).map(|(_, v)| *v)
}
