//! The vocabulary of the synthetic scenes: entity kinds with their synonyms, attributes, Flickr30k
//! Entities phrase type and COCO category; PropBank frames with their surface forms and the
//! roles their subject and object fill; locations with the prepositions that introduce them.
//!
//! Every concept of a generated AMR is either a lemma listed here or a frame whose lemma (the
//! part before `-NN`) is the base form of its verb, so that alignment targets are always the
//! lemma itself or one of the inflections written out in [`Noun`] and [`Verb`].

/// One wording of an entity: the concept lemma and its singular and plural surface forms.
#[derive(Clone, Copy, Debug)]
pub struct Noun {
    pub lemma: &'static str,
    pub singular: &'static str,
    pub plural: &'static str,
}

const fn noun(lemma: &'static str, plural: &'static str) -> Noun {
    Noun {
        lemma,
        singular: lemma,
        plural,
    }
}

/// Where an entity's box goes relative to the main actor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A standing or sitting figure: tall box resting on the lower part of the image.
    Figure,
    /// An animal: wider than tall, lower in the image.
    Animal,
    /// Worn on the upper body (inside the wearer's box).
    UpperBody,
    /// Worn on the head (top of the wearer's box).
    Head,
    /// Ridden or pushed: overlaps the lower half of the actor, wider than it.
    Ridden,
    /// Held in the hands: small, in the middle of the actor's box.
    Handheld,
    /// Beside the actor at ground level (a dog on a leash, a ball being chased).
    Beside,
}

/// A kind of entity with its synonyms and how it is labelled in each source format.
#[derive(Debug)]
pub struct EntityKind {
    /// Synonyms; the first is the most frequent wording.
    pub nouns: &'static [Noun],
    /// Flickr30k Entities phrase type.
    pub flickr_type: &'static str,
    /// Official COCO category (id, name) when a detector would find it.
    pub coco: Option<(u32, &'static str)>,
    /// Attributes that may describe it (`:mod` in the AMR).
    pub adjectives: &'static [&'static str],
    pub placement: Placement,
}

const AGE: &[&str] = &["young", "old", "little", "tall"];
const CHILD_AGE: &[&str] = &["little", "young", "small", "happy"];
const FUR: &[&str] = &["brown", "black", "white", "small", "large", "little"];
const COLORS: &[&str] = &[
    "red", "blue", "black", "white", "green", "yellow", "pink", "orange", "gray", "purple",
];

pub static MAN: EntityKind = EntityKind {
    nouns: &[noun("man", "men"), noun("guy", "guys")],
    flickr_type: "people",
    coco: Some((1, "person")),
    adjectives: AGE,
    placement: Placement::Figure,
};
pub static WOMAN: EntityKind = EntityKind {
    nouns: &[noun("woman", "women"), noun("lady", "ladies")],
    flickr_type: "people",
    coco: Some((1, "person")),
    adjectives: AGE,
    placement: Placement::Figure,
};
pub static BOY: EntityKind = EntityKind {
    nouns: &[
        noun("boy", "boys"),
        noun("kid", "kids"),
        noun("child", "children"),
    ],
    flickr_type: "people",
    coco: Some((1, "person")),
    adjectives: CHILD_AGE,
    placement: Placement::Figure,
};
pub static GIRL: EntityKind = EntityKind {
    nouns: &[
        noun("girl", "girls"),
        noun("kid", "kids"),
        noun("child", "children"),
    ],
    flickr_type: "people",
    coco: Some((1, "person")),
    adjectives: CHILD_AGE,
    placement: Placement::Figure,
};
pub static PERSON: EntityKind = EntityKind {
    nouns: &[noun("person", "people")],
    flickr_type: "people",
    coco: Some((1, "person")),
    adjectives: AGE,
    placement: Placement::Figure,
};
pub static DOG: EntityKind = EntityKind {
    nouns: &[noun("dog", "dogs"), noun("puppy", "puppies")],
    flickr_type: "animals",
    coco: Some((18, "dog")),
    adjectives: FUR,
    placement: Placement::Animal,
};
pub static CAT: EntityKind = EntityKind {
    nouns: &[noun("cat", "cats"), noun("kitten", "kittens")],
    flickr_type: "animals",
    coco: Some((17, "cat")),
    adjectives: FUR,
    placement: Placement::Animal,
};
pub static HORSE: EntityKind = EntityKind {
    nouns: &[noun("horse", "horses"), noun("pony", "ponies")],
    flickr_type: "animals",
    coco: Some((19, "horse")),
    adjectives: &["brown", "white", "black", "large"],
    placement: Placement::Animal,
};

pub static PEOPLE: &[&EntityKind] = &[&MAN, &WOMAN, &BOY, &GIRL, &PERSON];
pub static PETS: &[&EntityKind] = &[&DOG, &CAT];

pub static UPPER_CLOTHING: EntityKind = EntityKind {
    nouns: &[
        noun("shirt", "shirts"),
        noun("jacket", "jackets"),
        noun("coat", "coats"),
        noun("sweater", "sweaters"),
        noun("dress", "dresses"),
        noun("hoodie", "hoodies"),
        noun("uniform", "uniforms"),
    ],
    flickr_type: "clothing",
    coco: None,
    adjectives: COLORS,
    placement: Placement::UpperBody,
};
pub static HEADWEAR: EntityKind = EntityKind {
    nouns: &[
        noun("hat", "hats"),
        noun("helmet", "helmets"),
        noun("cap", "caps"),
    ],
    flickr_type: "clothing",
    coco: None,
    adjectives: COLORS,
    placement: Placement::Head,
};

pub static BICYCLE: EntityKind = EntityKind {
    nouns: &[noun("bicycle", "bicycles"), noun("bike", "bikes")],
    flickr_type: "vehicles",
    coco: Some((2, "bicycle")),
    adjectives: COLORS,
    placement: Placement::Ridden,
};
pub static MOTORCYCLE: EntityKind = EntityKind {
    nouns: &[
        noun("motorcycle", "motorcycles"),
        noun("motorbike", "motorbikes"),
    ],
    flickr_type: "vehicles",
    coco: Some((4, "motorcycle")),
    adjectives: COLORS,
    placement: Placement::Ridden,
};
pub static SKATEBOARD: EntityKind = EntityKind {
    nouns: &[noun("skateboard", "skateboards")],
    flickr_type: "other",
    coco: Some((41, "skateboard")),
    adjectives: COLORS,
    placement: Placement::Ridden,
};
pub static SURFBOARD: EntityKind = EntityKind {
    nouns: &[noun("surfboard", "surfboards")],
    flickr_type: "other",
    coco: Some((42, "surfboard")),
    adjectives: COLORS,
    placement: Placement::Ridden,
};
pub static RIDDEN_HORSE: EntityKind = EntityKind {
    nouns: HORSE.nouns,
    flickr_type: "animals",
    coco: Some((19, "horse")),
    adjectives: &["brown", "white", "black", "large"],
    placement: Placement::Ridden,
};
pub static GUITAR: EntityKind = EntityKind {
    nouns: &[noun("guitar", "guitars")],
    flickr_type: "instruments",
    coco: None,
    adjectives: &["acoustic", "electric", "red", "black"],
    placement: Placement::Handheld,
};
pub static DRUM: EntityKind = EntityKind {
    nouns: &[noun("drum", "drums")],
    flickr_type: "instruments",
    coco: None,
    adjectives: &["large", "small", "red"],
    placement: Placement::Handheld,
};
pub static VIOLIN: EntityKind = EntityKind {
    nouns: &[noun("violin", "violins"), noun("fiddle", "fiddles")],
    flickr_type: "instruments",
    coco: None,
    adjectives: &["brown", "small"],
    placement: Placement::Handheld,
};
pub static UMBRELLA: EntityKind = EntityKind {
    nouns: &[noun("umbrella", "umbrellas")],
    flickr_type: "other",
    coco: Some((28, "umbrella")),
    adjectives: COLORS,
    placement: Placement::Handheld,
};
pub static BAG: EntityKind = EntityKind {
    nouns: &[noun("bag", "bags"), noun("purse", "purses")],
    flickr_type: "other",
    coco: Some((31, "handbag")),
    adjectives: COLORS,
    placement: Placement::Handheld,
};
pub static CUP: EntityKind = EntityKind {
    nouns: &[noun("cup", "cups"), noun("mug", "mugs")],
    flickr_type: "other",
    coco: Some((47, "cup")),
    adjectives: &["white", "red", "large", "small"],
    placement: Placement::Handheld,
};
pub static PHONE: EntityKind = EntityKind {
    nouns: &[noun("phone", "phones")],
    flickr_type: "other",
    coco: Some((77, "cell phone")),
    adjectives: &["black", "white", "pink"],
    placement: Placement::Handheld,
};
pub static BALL: EntityKind = EntityKind {
    nouns: &[noun("ball", "balls")],
    flickr_type: "other",
    coco: Some((37, "sports ball")),
    adjectives: &["red", "yellow", "white", "blue", "orange", "small"],
    placement: Placement::Beside,
};
pub static FRISBEE: EntityKind = EntityKind {
    nouns: &[noun("frisbee", "frisbees")],
    flickr_type: "other",
    coco: Some((34, "frisbee")),
    adjectives: &["red", "yellow", "white", "blue", "orange", "green"],
    placement: Placement::Beside,
};
pub static KITE: EntityKind = EntityKind {
    nouns: &[noun("kite", "kites")],
    flickr_type: "other",
    coco: Some((38, "kite")),
    adjectives: COLORS,
    placement: Placement::Handheld,
};
pub static LEASHED_DOG: EntityKind = EntityKind {
    nouns: DOG.nouns,
    flickr_type: "animals",
    coco: Some((18, "dog")),
    adjectives: FUR,
    placement: Placement::Beside,
};

/// A PropBank frame with its surface forms and the roles of its subject and object.
#[derive(Debug)]
pub struct Verb {
    pub frame: &'static str,
    pub base: &'static str,
    pub third_person: &'static str,
    pub progressive: &'static str,
    /// Role of the subject (`:ARG0` for agents, `:ARG1` for the theme of `sit-01`, `stand-01`).
    pub subject_role: &'static str,
    /// Role of the object and the kinds it may take; `None` for intransitive use.
    pub object: Option<(&'static str, &'static [&'static EntityKind])>,
}

/// What kind of actor a verb takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActorClass {
    Person,
    Pet,
}

/// The verbs with the actors they suit.
pub static VERBS: &[(ActorClass, Verb)] = &[
    (
        ActorClass::Person,
        Verb {
            frame: "ride-01",
            base: "ride",
            third_person: "rides",
            progressive: "riding",
            subject_role: ":ARG0",
            object: Some((
                ":ARG1",
                &[
                    &BICYCLE,
                    &MOTORCYCLE,
                    &SKATEBOARD,
                    &SURFBOARD,
                    &RIDDEN_HORSE,
                ],
            )),
        },
    ),
    (
        ActorClass::Person,
        Verb {
            frame: "play-11",
            base: "play",
            third_person: "plays",
            progressive: "playing",
            subject_role: ":ARG0",
            object: Some((":ARG2", &[&GUITAR, &DRUM, &VIOLIN])),
        },
    ),
    (
        ActorClass::Person,
        Verb {
            frame: "hold-01",
            base: "hold",
            third_person: "holds",
            progressive: "holding",
            subject_role: ":ARG0",
            object: Some((":ARG1", &[&UMBRELLA, &BAG, &CUP, &PHONE, &KITE])),
        },
    ),
    (
        ActorClass::Person,
        Verb {
            frame: "carry-01",
            base: "carry",
            third_person: "carries",
            progressive: "carrying",
            subject_role: ":ARG0",
            object: Some((":ARG1", &[&BAG, &UMBRELLA, &CUP, &SURFBOARD])),
        },
    ),
    (
        ActorClass::Person,
        Verb {
            frame: "throw-01",
            base: "throw",
            third_person: "throws",
            progressive: "throwing",
            subject_role: ":ARG0",
            object: Some((":ARG1", &[&BALL, &FRISBEE])),
        },
    ),
    (
        ActorClass::Person,
        Verb {
            frame: "walk-01",
            base: "walk",
            third_person: "walks",
            progressive: "walking",
            subject_role: ":ARG0",
            object: Some((":ARG1", &[&LEASHED_DOG])),
        },
    ),
    (
        ActorClass::Person,
        Verb {
            frame: "walk-01",
            base: "walk",
            third_person: "walks",
            progressive: "walking",
            subject_role: ":ARG0",
            object: None,
        },
    ),
    (
        ActorClass::Person,
        Verb {
            frame: "sit-01",
            base: "sit",
            third_person: "sits",
            progressive: "sitting",
            subject_role: ":ARG1",
            object: None,
        },
    ),
    (
        ActorClass::Person,
        Verb {
            frame: "stand-01",
            base: "stand",
            third_person: "stands",
            progressive: "standing",
            subject_role: ":ARG1",
            object: None,
        },
    ),
    (
        ActorClass::Person,
        Verb {
            frame: "run-02",
            base: "run",
            third_person: "runs",
            progressive: "running",
            subject_role: ":ARG0",
            object: None,
        },
    ),
    (
        ActorClass::Pet,
        Verb {
            frame: "run-02",
            base: "run",
            third_person: "runs",
            progressive: "running",
            subject_role: ":ARG0",
            object: None,
        },
    ),
    (
        ActorClass::Pet,
        Verb {
            frame: "sit-01",
            base: "sit",
            third_person: "sits",
            progressive: "sitting",
            subject_role: ":ARG1",
            object: None,
        },
    ),
    (
        ActorClass::Pet,
        Verb {
            frame: "jump-03",
            base: "jump",
            third_person: "jumps",
            progressive: "jumping",
            subject_role: ":ARG0",
            object: None,
        },
    ),
    (
        ActorClass::Pet,
        Verb {
            frame: "catch-01",
            base: "catch",
            third_person: "catches",
            progressive: "catching",
            subject_role: ":ARG0",
            object: Some((":ARG1", &[&FRISBEE, &BALL])),
        },
    ),
    (
        ActorClass::Pet,
        Verb {
            frame: "chase-01",
            base: "chase",
            third_person: "chases",
            progressive: "chasing",
            subject_role: ":ARG0",
            object: Some((":ARG1", &[&BALL, &FRISBEE])),
        },
    ),
];

/// A place with the prepositions that introduce it and an optional modifier noun.
#[derive(Debug)]
pub struct Location {
    pub noun: &'static str,
    pub prepositions: &'static [&'static str],
    pub modifiers: &'static [&'static str],
}

pub static LOCATIONS: &[Location] = &[
    Location {
        noun: "street",
        prepositions: &["on", "down"],
        modifiers: &["city", "busy"],
    },
    Location {
        noun: "park",
        prepositions: &["in", "at"],
        modifiers: &["city", "public"],
    },
    Location {
        noun: "beach",
        prepositions: &["on", "at"],
        modifiers: &["sandy", "rocky"],
    },
    Location {
        noun: "field",
        prepositions: &["in", "across"],
        modifiers: &["grassy", "open"],
    },
    Location {
        noun: "sidewalk",
        prepositions: &["on", "along"],
        modifiers: &["busy", "wet"],
    },
    Location {
        noun: "road",
        prepositions: &["on", "along", "down"],
        modifiers: &["dirt", "country"],
    },
    Location {
        noun: "yard",
        prepositions: &["in"],
        modifiers: &["back", "grassy"],
    },
    Location {
        noun: "snow",
        prepositions: &["in", "through"],
        modifiers: &["deep", "fresh"],
    },
    Location {
        noun: "plaza",
        prepositions: &["in", "across"],
        modifiers: &["crowded", "stone"],
    },
    Location {
        noun: "stage",
        prepositions: &["on"],
        modifiers: &["outdoor", "small"],
    },
];

/// Objects no caption mentions that a detector still finds (official COCO ids).
pub static DISTRACTORS: &[(u32, &str)] = &[
    (3, "car"),
    (10, "traffic light"),
    (15, "bench"),
    (16, "bird"),
    (27, "backpack"),
    (44, "bottle"),
    (62, "chair"),
    (64, "potted plant"),
];

/// Every COCO category the generator can write, in id order (the `categories` of
/// `instances.json`).
pub static COCO_CATEGORIES: &[(u32, &str, &str)] = &[
    (1, "person", "person"),
    (2, "bicycle", "vehicle"),
    (3, "car", "vehicle"),
    (4, "motorcycle", "vehicle"),
    (10, "traffic light", "outdoor"),
    (15, "bench", "outdoor"),
    (16, "bird", "animal"),
    (17, "cat", "animal"),
    (18, "dog", "animal"),
    (19, "horse", "animal"),
    (27, "backpack", "accessory"),
    (28, "umbrella", "accessory"),
    (31, "handbag", "accessory"),
    (34, "frisbee", "sports"),
    (37, "sports ball", "sports"),
    (38, "kite", "sports"),
    (41, "skateboard", "sports"),
    (42, "surfboard", "sports"),
    (44, "bottle", "kitchen"),
    (47, "cup", "kitchen"),
    (62, "chair", "furniture"),
    (64, "potted plant", "furniture"),
    (77, "cell phone", "electronic"),
];

/// Flickr-like image sizes (width, height) with relative weights: most photos are 500 wide
/// landscape at 4:3 or 3:2; a quarter are portrait 500 tall.
pub static IMAGE_SIZES: &[(u32, u32, u32)] = &[
    (500, 375, 30),
    (500, 333, 25),
    (500, 334, 5),
    (500, 332, 3),
    (500, 281, 4),
    (500, 400, 3),
    (500, 500, 5),
    (375, 500, 12),
    (333, 500, 10),
    (334, 500, 3),
];

/// Numbers for groups of two or three.
pub fn number_word(count: u32) -> &'static str {
    match count {
        2 => "two",
        3 => "three",
        _ => "one",
    }
}
