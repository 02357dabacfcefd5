//! Constructions one at a time, each with the sentence a person would write for the graph.

use super::*;

fn realize(penman: &str) -> String {
    Realizer::builtin().realize(&penman::parse(penman).unwrap())
}

#[test]
fn subject_verb_object_with_adjective() {
    assert_eq!(
        realize("(r / ride-01 :ARG0 (m / man :mod (y / young)) :ARG1 (b / bicycle))"),
        "A young man rides a bicycle ."
    );
}

#[test]
fn an_before_a_vowel_sound() {
    assert_eq!(
        realize("(r / read-01 :ARG0 (m / man :mod (o / old)) :ARG1 (n / newspaper))"),
        "An old man reads a newspaper ."
    );
    assert_eq!(
        realize("(p / put-01 :ARG0 (c / chef) :ARG1 (p2 / pizza) :ARG2 (o / oven))"),
        "A chef puts a pizza into an oven ."
    );
}

#[test]
fn re_mention_is_definite_or_a_pronoun() {
    // The dog is mentioned again as the controlled subject of "catch" (dropped) and the
    // second dog's object (a pronoun).
    assert_eq!(
        realize(
            "(c / carry-01 :ARG0 (d / dog :quant 1) :ARG1 (b / ball)
               :time (c2 / chase-01 :ARG0 (d2 / dog :mod (o / other)) :ARG1 d))"
        ),
        "One dog carries a ball while the other dog chases it ."
    );
    assert_eq!(
        realize(
            "(s / see-01 :ARG0 (p / person) :ARG1 (p2 / person :ARG0-of (h / help-01 :ARG1 p)))"
        ),
        "A person sees a person helping the person ."
    );
}

#[test]
fn quantities_make_plurals() {
    assert_eq!(
        realize(
            "(p / play-01 :ARG0 (c / child :quant 3) :ARG1 (s / soccer) :location (p2 / park))"
        ),
        "Three children play soccer in a park ."
    );
    assert_eq!(
        realize("(w / wait-01 :ARG1 (p / person :quant (s / several)) :location (s2 / sidewalk))"),
        "Several people wait on a sidewalk ."
    );
    assert_eq!(realize("(d / dog :quant 42)"), "42 dogs .");
}

#[test]
fn inverse_roles_become_participles_and_relatives() {
    assert_eq!(
        realize("(m / man :ARG0-of (w / wear-01 :ARG1 (h / hat)) :location (h2 / horse))"),
        "A man wearing a hat is on a horse ."
    );
    assert_eq!(
        realize(
            "(r / ride-01 :ARG0 (c / cyclist) :location (n / next-to :op1 (c2 / car :ARG1-of (p / park-01))))"
        ),
        "A cyclist rides next to a parked car ."
    );
    assert_eq!(
        realize(
            "(c / catch-01 :ARG0 (d / dog) :ARG1 (f / frisbee :ARG1-of (t / throw-01 :ARG0 (m / man))))"
        ),
        "A dog catches a frisbee thrown by a man ."
    );
    assert_eq!(
        realize(
            "(s / stop-01 :ARG1 (b / bus) :beneficiary (p / passenger :ARG1-of (w / wait-01)))"
        ),
        "A bus stops for a waiting passenger ."
    );
    assert_eq!(
        realize("(l / leap-01 :ARG0 (m / man :ARG0-of (h / have-03 :ARG1 (b / ball))))"),
        "A man with a ball leaps ."
    );
}

#[test]
fn adjective_frames_and_copulas() {
    assert_eq!(
        realize("(h / happy-01 :ARG1 (g / girl :mod (l / little)))"),
        "A little girl is happy ."
    );
    assert_eq!(
        realize("(h / hold-01 :ARG0 (w / woman) :ARG1 (u / umbrella :ARG1-of (r / red-02)))"),
        "A woman holds a red umbrella ."
    );
}

#[test]
fn and_or_lists() {
    assert_eq!(
        realize(
            "(r / race-02 :ARG0 (a / and :op1 (d / dog :mod (b / brown)) :op2 (d2 / dog :ARG1-of (w / white-03))) :path (w2 / water))"
        ),
        "A brown dog and a white dog race through water ."
    );
    assert_eq!(
        realize("(s / sell-01 :ARG0 (v / vendor) :ARG1 (a / and :op1 (a2 / apple) :op2 (p / pear) :op3 (p2 / plum)))"),
        "A vendor sells an apple , a pear , and a plum ."
    );
    assert_eq!(
        realize("(e / eat-01 :ARG0 (o / or :op1 (c / cat) :op2 (d / dog)) :ARG1 (f / fish))"),
        "A cat or a dog eats a fish ."
    );
    // Clauses sharing their subject.
    assert_eq!(
        realize(
            "(a / and :op1 (s / sit-01 :ARG1 (p / person :quant 4) :ARG2 (b / blanket))
                      :op2 (s2 / share-01 :ARG0 p :ARG1 (s3 / sandwich)))"
        ),
        "Four people sit on a blanket and share a sandwich ."
    );
}

#[test]
fn possession() {
    assert_eq!(
        realize("(r / ride-01 :ARG0 (m / man) :ARG1 (b / bike :poss m))"),
        "A man rides his bike ."
    );
    assert_eq!(
        realize("(r / ride-01 :ARG0 (g / girl) :ARG1 (b / bike :poss (b2 / boy)))"),
        "A girl rides a boy 's bike ."
    );
    assert_eq!(
        realize("(r / raise-01 :ARG0 (w / woman) :ARG1 (a / arm :part-of w))"),
        "A woman raises her arm ."
    );
    assert_eq!(
        realize(
            "(w / watch-01 :ARG0 (p / person :ARG0-of (h / have-rel-role-91 :ARG1 (b / boy) :ARG2 (f / friend))) :ARG1 (g / game))"
        ),
        "A boy 's friend watches a game ."
    );
}

#[test]
fn negation() {
    assert_eq!(
        realize("(w / wear-01 :polarity - :ARG0 (m / man) :ARG1 (h / hat))"),
        "A man does not wear a hat ."
    );
    assert_eq!(
        realize("(s / sit-01 :polarity - :ARG1 (d / dog :quant 2))"),
        "Two dogs do not sit ."
    );
}

#[test]
fn multi_sentence() {
    assert_eq!(
        realize(
            "(m / multi-sentence :snt1 (s / sleep-01 :ARG0 (c / cat)) :snt2 (b / bark-01 :ARG0 (d / dog)))"
        ),
        "A cat sleeps . A dog barks ."
    );
}

#[test]
fn purpose_time_and_manner_clauses() {
    assert_eq!(
        realize(
            "(j / jump-03 :ARG0 (d / dog) :purpose (c / catch-01 :ARG0 d :ARG1 (f / frisbee)))"
        ),
        "A dog jumps to catch a frisbee ."
    );
    assert_eq!(
        realize("(s / sit-01 :ARG1 (m / man) :ARG2 (b / bench) :manner (r / read-01 :ARG0 m))"),
        "A man sits on a bench reading ."
    );
    assert_eq!(
        realize(
            "(k / kick-01 :ARG0 (b / boy) :ARG1 (b2 / ball) :time (w / watch-01 :ARG0 (g / girl)))"
        ),
        "A boy kicks a ball while a girl watches ."
    );
    assert_eq!(
        realize("(p / place-01 :ARG0 (c / chef) :ARG1 (p2 / pizza) :manner (c2 / careful))"),
        "A chef places a pizza carefully ."
    );
}

#[test]
fn named_entities_and_pronouns() {
    assert_eq!(
        realize("(v / visit-01 :ARG0 (p / person :name (n / name :op1 \"Ann\")) :ARG1 (c / city :name (n2 / name :op1 \"New\" :op2 \"York\")))"),
        "Ann visits New York ."
    );
    assert_eq!(
        realize("(c / climb-01 :ARG0 (s / she) :ARG1 (w / wall))"),
        "She climbs a wall ."
    );
}

#[test]
fn groups_and_materials() {
    assert_eq!(
        realize("(s / stand-01 :ARG1 (g / group :consist-of (c / child :mod (y / young))))"),
        "A group of young children stands ."
    );
    assert_eq!(
        realize("(s / sit-01 :ARG1 (m / man) :ARG2 (b / bench :consist-of (w / wood)))"),
        "A man sits on a wood bench ."
    );
}

#[test]
fn odd_graphs_still_give_a_sentence() {
    let empty = Graph::default();
    assert_eq!(Realizer::builtin().realize(&empty), "Something .");
    assert_eq!(realize("(x / ride-01)"), "Someone rides .");
    assert_eq!(realize("(d / dog :ARG0-of d)"), "A dog .");
}

#[test]
fn documented_example() {
    // docs/realizer.md
    assert_eq!(
        realize(
            "(r / ride-01 :ARG0 (m / man :ARG0-of (w / wear-01 :ARG1 (h / hat))) :ARG1 (b / bike :poss m))"
        ),
        "A man wearing a hat rides his bike ."
    );
}
