//! The grammar: clauses from predicates, noun phrases from everything else.
//!
//! One [`Writer`] realizes one graph into a caller's `String`, word by word, with no
//! intermediate syntax tree: the graph already is one. Each node is realized in full the first
//! time the output reaches it and as a re-mention ("the dog", "his") afterwards, which also
//! bounds the recursion on cyclic graphs.

use std::borrow::Cow;

use super::tree::{Link, Target, Tree};
use super::words::{self, ArgForm, Gender};
use crate::amr::align::{is_predicate, strip_sense};
use crate::text::inflect::{class, indefinite_article, Lexicon};

/// Deeper structures are cut: the realizer must never overflow the stack on a hostile graph.
const MAX_DEPTH: usize = 48;

/// Verb forms a clause can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// Present simple with its subject: "a man rides a bike".
    Finite,
    /// Present participle without subject: "riding a bike".
    Ing,
    /// "to ride a bike".
    Infinitive,
    /// Past participle, passive: "thrown by a man".
    Passive,
}

/// What kind of thing a node is, for the grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind<'g> {
    Coordination(&'static str),
    MultiSentence,
    /// A verb frame; the lemma without sense.
    Verb(&'g str),
    /// An adjective frame (`red-02`, `happy-01`).
    Adjective(&'g str),
    /// A frame that reads as a preposition between `:ARG1` and `:ARG2` (`near-02`).
    PrepositionFrame(&'static str),
    /// A preposition concept with its object in `:op1` (`next-to`).
    Preposition(&'static str),
    Pronoun,
    Noun,
}

pub(super) struct Writer<'a, 'g> {
    lex: &'a Lexicon,
    tree: &'a Tree<'g>,
    out: &'a mut String,
    mentioned: Vec<bool>,
    /// Each node's [`Kind`], classified once.
    kinds: Vec<Kind<'g>>,
    depth: usize,
}

/// A premodifier that goes right before the head, after the adjectives.
enum NounPremodifier<'g> {
    Node(usize),
    /// The purpose of a thing: "cutting board".
    Gerund(&'g str),
}

impl<'a, 'g> Writer<'a, 'g> {
    pub fn new(lex: &'a Lexicon, tree: &'a Tree<'g>, out: &'a mut String) -> Self {
        Writer {
            lex,
            tree,
            out,
            mentioned: vec![false; tree.concepts.len()],
            kinds: tree
                .concepts
                .iter()
                .map(|c| Self::classify(lex, c))
                .collect(),
            depth: 0,
        }
    }

    /// Realizes the whole graph as one or more sentences.
    pub fn graph(&mut self) {
        match self.tree.top {
            Target::Node(top) => match self.kind(top) {
                Kind::MultiSentence => {
                    let parts: Vec<usize> = self
                        .tree
                        .links(top)
                        .iter()
                        .filter(|l| !l.inverse && l.tree && l.role.starts_with("snt"))
                        .filter_map(Link::node)
                        .collect();
                    for part in &parts {
                        self.sentence(*part);
                    }
                    if parts.is_empty() {
                        self.sentence_of(|w| w.word("something"));
                    }
                }
                _ => self.sentence(top),
            },
            Target::Const(c) => {
                let c = unquote(c);
                self.sentence_of(|w| w.word(if c.is_empty() { "something" } else { c }));
            }
        }
    }

    fn sentence(&mut self, root: usize) {
        self.sentence_of(|w| w.root(root));
    }

    fn sentence_of(&mut self, body: impl FnOnce(&mut Self)) {
        let start = self.out.len();
        body(self);
        if self.out.len() == start || self.out[start..].trim().is_empty() {
            self.out.truncate(start);
            self.word("something");
        }
        capitalize_from(self.out, start);
        self.word(".");
    }

    // ---------------------------------------------------------------- output

    fn word(&mut self, w: &str) {
        if w.is_empty() {
            return;
        }
        if !self.out.is_empty() && !self.out.ends_with(' ') {
            self.out.push(' ');
        }
        self.out.push_str(w);
    }

    /// A concept as words: `next-to` → "next to", `double-decker` stays.
    fn surface(concept: &str) -> Cow<'_, str> {
        const GLUE: &[&str] = &[
            "and", "by", "to", "of", "in", "on", "at", "from", "for", "the",
        ];
        if concept.contains('-') && concept.split('-').any(|p| GLUE.contains(&p)) {
            Cow::Owned(concept.replace('-', " "))
        } else {
            Cow::Borrowed(concept)
        }
    }

    // ---------------------------------------------------------------- classification

    fn concept(&self, n: usize) -> &'g str {
        self.tree.concepts[n]
    }

    fn kind(&self, n: usize) -> Kind<'g> {
        self.kinds[n]
    }

    fn classify(lex: &Lexicon, concept: &'g str) -> Kind<'g> {
        match concept {
            "and" => return Kind::Coordination("and"),
            "or" => return Kind::Coordination("or"),
            "multi-sentence" => return Kind::MultiSentence,
            _ => {}
        }
        if is_predicate(concept) {
            let lemma = strip_sense(concept);
            if let Some(prep) = words::prepositional_predicate(lemma) {
                return Kind::PrepositionFrame(prep);
            }
            if lex.is(lemma, class::ADJECTIVE) {
                return Kind::Adjective(lemma);
            }
            return Kind::Verb(lemma);
        }
        if let Some(prep) = words::spatial_preposition(concept) {
            return Kind::Preposition(prep);
        }
        if words::pronoun(concept).is_some() {
            return Kind::Pronoun;
        }
        Kind::Noun
    }

    fn is_clausal(&self, n: usize) -> bool {
        self.is_clausal_within(n, 0)
    }

    fn is_clausal_within(&self, n: usize, depth: usize) -> bool {
        match self.kind(n) {
            Kind::Verb(lemma) => !is_relation_frame(lemma),
            Kind::Coordination(_) if depth < 8 => self
                .ops(n)
                .iter()
                .any(|&op| self.is_clausal_within(op, depth + 1)),
            _ => false,
        }
    }

    fn ops(&self, n: usize) -> Vec<usize> {
        let mut ops: Vec<(&str, usize)> = self
            .tree
            .links(n)
            .iter()
            .filter(|l| !l.inverse && l.role.starts_with("op"))
            .filter_map(|l| Some((l.role, l.node()?)))
            .collect();
        // `op10` after `op9`.
        ops.sort_by_key(|(role, _)| (role.len(), *role));
        ops.into_iter().map(|(_, n)| n).collect()
    }

    fn args(&self, p: usize) -> Vec<(u8, Link<'g>)> {
        self.tree
            .links(p)
            .iter()
            .filter(|l| !l.inverse && l.node().is_some())
            .filter_map(|l| Some((l.arg()?, *l)))
            .collect()
    }

    fn arg_node(&self, p: usize, arg: u8) -> Option<usize> {
        self.tree
            .links(p)
            .iter()
            .find(|l| !l.inverse && l.arg() == Some(arg))
            .and_then(Link::node)
    }

    /// The argument a clause of `p` has as its subject.
    fn subject_arg(&self, p: usize) -> Option<u8> {
        self.subject_arg_given(p, None)
    }

    /// The subject argument when `gap` (realized outside the clause) counts as present.
    fn subject_arg_given(&self, p: usize, gap: Option<u8>) -> Option<u8> {
        let has = |a| gap == Some(a) || self.arg_node(p, a).is_some();
        match self.kind(p) {
            Kind::Adjective(_) | Kind::PrepositionFrame(_) => [1, 0].into_iter().find(|&a| has(a)),
            _ => [0, 1].into_iter().find(|&a| has(a)),
        }
    }

    fn subject_node(&self, p: usize) -> Option<usize> {
        self.subject_arg(p).and_then(|a| self.arg_node(p, a))
    }

    fn negated(&self, n: usize) -> bool {
        self.tree
            .links(n)
            .iter()
            .any(|l| l.role == "polarity" && l.target == Target::Const("-"))
    }

    fn quantity(&self, n: usize) -> Option<u64> {
        match self.tree.find(n, "quant", false)?.target {
            Target::Const(c) => unquote(c).parse().ok(),
            Target::Node(q) => match self.concept(q) {
                "one" | "single" => Some(1),
                _ => None,
            },
        }
    }

    fn is_plural(&self, n: usize) -> bool {
        self.is_plural_within(n, 0)
    }

    fn is_plural_within(&self, n: usize, depth: usize) -> bool {
        match self.kind(n) {
            Kind::Coordination(c) => {
                c == "and"
                    || (depth < 8
                        && self
                            .ops(n)
                            .last()
                            .is_some_and(|&op| self.is_plural_within(op, depth + 1)))
            }
            Kind::Pronoun => words::pronoun(self.concept(n)).is_some_and(|p| p.3),
            _ => {
                if let Some(q) = self.quantity(n) {
                    return q != 1;
                }
                if words::plural_only(self.head_concept(n)) {
                    return true;
                }
                self.tree.links(n).iter().any(|l| {
                    !l.inverse
                        && matches!(l.role, "quant" | "mod")
                        && l.node()
                            .and_then(|q| words::determiner(self.concept(q)))
                            .is_some_and(words::plural_determiner)
                })
            }
        }
    }

    fn gender(&self, n: usize) -> Gender {
        let head = self.head_concept(n);
        if let Some(g) = words::gender_of(head) {
            return g;
        }
        if matches!(head, "person" | "someone" | "somebody" | "people")
            || self.lex.is(head, class::PERSON)
        {
            Gender::Person
        } else {
            Gender::Thing
        }
    }

    /// The noun a node is named by: a person with a relation role is named by the role.
    fn head_concept(&self, n: usize) -> &'g str {
        self.role_noun(n)
            .map_or_else(|| self.concept(n), |(role, _)| self.concept(role))
    }

    /// `(p / person :ARG0-of (h / have-rel-role-91 :ARG1 b :ARG2 (f / friend)))`: the role
    /// noun (`friend`) and whose role it is (`b`).
    fn role_noun(&self, n: usize) -> Option<(usize, Option<usize>)> {
        self.tree.links(n).iter().find_map(|l| {
            let r = l.node()?;
            if !(l.inverse && l.arg() == Some(0)) {
                return None;
            }
            let frame = strip_sense(self.concept(r));
            if frame != "have-rel-role" && frame != "have-org-role" {
                return None;
            }
            let role = self.arg_node(r, 2)?;
            Some((role, self.arg_node(r, 1)))
        })
    }

    /// A node made only of `:mod` leaves (`young`, `city`, `very old`): a premodifier.
    fn is_simple(&self, n: usize, depth: usize) -> bool {
        depth < 4
            && self.tree.links(n).iter().all(|l| {
                !l.inverse
                    && l.tree
                    && l.role == "mod"
                    && l.node().is_some_and(|m| self.is_simple(m, depth + 1))
            })
    }

    fn is_generic_head(concept: &str) -> bool {
        matches!(
            concept,
            "person" | "thing" | "someone" | "something" | "people"
        )
    }

    // ---------------------------------------------------------------- sentences

    fn root(&mut self, n: usize) {
        match self.kind(n) {
            Kind::Verb(_) | Kind::Adjective(_) | Kind::PrepositionFrame(_) => {
                self.clause(n, Form::Finite, None, false);
            }
            Kind::Coordination(conj) if self.is_clausal(n) => self.coordinated_clauses(n, conj),
            Kind::Noun if self.has_locative(n) => {
                // "A man wearing a hat is on a horse ."
                let options = NounOptions {
                    skip_locative: true,
                    ..NounOptions::default()
                };
                let plural = self.noun_phrase_with(n, Case::Subject, options);
                self.word(if plural { "are" } else { "is" });
                let tree = self.tree;
                let links = tree.links(n);
                for l in links {
                    if self.is_locative(l) {
                        self.modifier(l, None);
                    }
                }
            }
            _ => {
                self.noun_phrase(n, Case::Subject);
            }
        }
    }

    fn is_locative(&self, l: &Link) -> bool {
        !l.inverse
            && l.tree
            && l.role == "location"
            && l.node().is_some_and(|c| !self.is_clausal(c))
    }

    fn has_locative(&self, n: usize) -> bool {
        self.tree.links(n).iter().any(|l| self.is_locative(l))
    }

    /// `(a / and :op1 (s / sit-01 ...) :op2 (c / cut-01 ...) :location ...)`: the clauses
    /// share the first one's subject where they have the same one.
    fn coordinated_clauses(&mut self, n: usize, conj: &'static str) {
        self.mentioned[n] = true;
        let ops = self.ops(n);
        let first_subject = ops.first().and_then(|&op| self.subject_node(op));
        let plural = first_subject.is_some_and(|s| self.is_plural(s));
        for (i, &op) in ops.iter().enumerate() {
            if i > 0 {
                self.list_separator(i, ops.len(), conj);
            }
            let shared = i > 0 && first_subject.is_some() && self.subject_node(op) == first_subject;
            if !self.is_clausal(op) {
                self.noun_phrase(op, Case::Subject);
            } else if shared {
                self.clause(op, Form::Finite, self.subject_arg(op), plural);
            } else {
                self.clause(op, Form::Finite, None, false);
            }
        }
        let tree = self.tree;
        let links = tree.links(n);
        for l in links.iter().filter(|l| !l.role.starts_with("op")) {
            self.modifier(l, first_subject);
        }
    }

    fn list_separator(&mut self, i: usize, len: usize, conj: &str) {
        if i + 1 < len {
            self.word(",");
        } else {
            if len > 2 {
                self.word(",");
            }
            self.word(conj);
        }
    }

    // ---------------------------------------------------------------- clauses

    /// Realizes predicate `p` in `form`. `gap` is the argument realized elsewhere (the head
    /// of a relative, a controlled subject); `gap_plural` is its number for agreement.
    fn clause(&mut self, p: usize, form: Form, gap: Option<u8>, gap_plural: bool) {
        // Every predicate is realized once; a cycle back to it says nothing more.
        if self.depth > MAX_DEPTH || self.mentioned[p] {
            return;
        }
        self.depth += 1;
        self.mentioned[p] = true;
        let kind = self.kind(p);
        let negative = self.negated(p);
        let subject_arg = match form {
            Form::Passive => Some(1),
            _ => self.subject_arg_given(p, gap),
        };
        let subject = subject_arg.and_then(|a| self.arg_node(p, a));
        // Subject.
        let mut plural = gap_plural;
        if form == Form::Finite {
            match (subject_arg, subject) {
                (Some(a), Some(s)) if gap != Some(a) => {
                    plural = self.noun_phrase(s, Case::Subject);
                }
                (_, None) if gap.is_none() => self.word("someone"),
                _ => {}
            }
        }
        // Verb group.
        if let Kind::Verb(lemma) = kind {
            if is_relation_frame(lemma) {
                self.relation_clause(p, form, plural, negative);
                self.depth -= 1;
                return;
            }
        }
        match kind {
            Kind::Adjective(adj) => {
                self.copula(form, plural, negative);
                self.word(adj);
            }
            Kind::PrepositionFrame(prep) => {
                self.copula(form, plural, negative);
                self.word(prep);
            }
            Kind::Verb(lemma) => self.verb_group(lemma, form, plural, negative),
            _ => {}
        }
        // Agent of a passive, then objects, then obliques.
        let args = self.args(p);
        if form == Form::Passive {
            if let Some((_, l)) = args.iter().find(|(a, _)| *a == 0) {
                self.word("by");
                self.argument(l, ArgForm::Object, None);
            }
        }
        let frame = self.concept(p);
        let mut rest: Vec<(u8, ArgForm, Link)> = args
            .iter()
            .filter(|(a, _)| Some(*a) != gap && Some(*a) != subject_arg)
            .filter(|(a, _)| !(form == Form::Passive && *a == 0))
            .map(|&(a, l)| {
                let f = match kind {
                    Kind::PrepositionFrame(_) if a == 2 => ArgForm::Object,
                    Kind::Adjective(_) | Kind::PrepositionFrame(_) => {
                        words::arg_form(frame, a.max(2))
                    }
                    _ => words::arg_form(frame, a),
                };
                (a, f, l)
            })
            .collect();
        // Objects first (by argument number), then prepositional arguments.
        rest.sort_by_key(|(a, f, _)| (*f != ArgForm::Object, *a));
        for (_, f, l) in &rest {
            self.argument(l, *f, subject);
        }
        // Modifiers: phrases in document order, subordinate clauses last.
        let tree = self.tree;
        let links = tree.links(p);
        let is_event = |w: &Self, l: &Link| {
            !l.inverse && l.arg().is_none() && l.node().is_some_and(|c| w.is_clausal(c))
        };
        for l in links.iter().filter(|l| l.arg().is_none() || l.inverse) {
            if !is_event(self, l) {
                self.modifier(l, subject);
            }
        }
        for l in links {
            if is_event(self, l) {
                self.modifier(l, subject);
            }
        }
        self.depth -= 1;
    }

    /// `have-rel-role-91 :ARG0 p :ARG1 b :ARG2 friend` → "[p] is a friend of [b]".
    fn relation_clause(&mut self, p: usize, form: Form, plural: bool, negative: bool) {
        self.copula(form, plural, negative);
        if let Some(role) = self.arg_node(p, 2) {
            self.noun_phrase(role, Case::Object);
        }
        if let Some(of) = self.arg_node(p, 1) {
            self.word("of");
            self.noun_phrase(of, Case::Object);
        }
    }

    fn copula(&mut self, form: Form, plural: bool, negative: bool) {
        match form {
            Form::Finite => self.word(if plural { "are" } else { "is" }),
            Form::Ing => self.word("being"),
            Form::Infinitive => self.word("to be"),
            Form::Passive => {}
        }
        if negative {
            self.word("not");
        }
    }

    fn verb_group(&mut self, lemma: &str, form: Form, plural: bool, negative: bool) {
        // Phrasal frames (`pick-up`): inflect the verb, keep the particle.
        let (verb, particle) = match lemma.split_once('-') {
            Some((v, rest)) => (v, Some(rest)),
            None => (lemma, None),
        };
        let lex = self.lex;
        match form {
            Form::Finite if negative => {
                self.word(if plural { "do not" } else { "does not" });
                self.word(verb);
            }
            Form::Finite if plural => self.word(verb),
            Form::Finite => self.word(&lex.third_person(verb)),
            Form::Ing => {
                if negative {
                    self.word("not");
                }
                self.word(&lex.present_participle(verb));
            }
            Form::Infinitive => {
                self.word(if negative { "not to" } else { "to" });
                self.word(verb);
            }
            Form::Passive => {
                if negative {
                    self.word("not");
                }
                self.word(&lex.past_participle(verb));
            }
        }
        if let Some(particle) = particle {
            self.word(&particle.replace('-', " "));
        }
    }

    /// A numbered argument in a non-subject position. `subject` is the clause's subject,
    /// which a clausal argument may share ("tries to block").
    fn argument(&mut self, l: &Link, form: ArgForm, subject: Option<usize>) {
        let Some(c) = l.node() else {
            return;
        };
        if self.is_clausal(c) {
            if self.mentioned[c] || !l.tree {
                return; // A re-entrant event ("while his friends watch [it]").
            }
            let frame = self.concept(l.owner_node());
            if let (ArgForm::Prep(p), Some(a)) = (form, l.arg()) {
                // Only a frame's own preposition; the defaults are for noun phrases.
                if words::frame_arg_form(frame, a).is_some() {
                    self.word(p);
                }
            }
            let controlled = subject.is_some() && self.subject_node(c) == subject;
            let complement = if l.arg() == Some(1) && controlled && form == ArgForm::Object {
                Form::Infinitive
            } else {
                Form::Ing
            };
            self.event(c, complement, controlled);
            return;
        }
        match self.kind(c) {
            Kind::Preposition(_) | Kind::PrepositionFrame(_) => self.prepositional(c),
            _ => {
                if let ArgForm::Prep(p) = form {
                    self.word(p);
                }
                self.noun_phrase(c, Case::Object);
            }
        }
    }

    /// An event in a non-finite form: `controlled` drops its subject, otherwise the subject
    /// is written first ("a rock band playing ...").
    fn event(&mut self, c: usize, form: Form, controlled: bool) {
        if self.mentioned[c] || self.depth > MAX_DEPTH {
            return;
        }
        if let Kind::Coordination(conj) = self.kind(c) {
            self.mentioned[c] = true;
            let ops = self.ops(c);
            for (i, &op) in ops.iter().enumerate() {
                if i > 0 {
                    self.list_separator(i, ops.len(), conj);
                }
                self.event(
                    op,
                    if i > 0 && form == Form::Infinitive {
                        Form::Finite
                    } else {
                        form
                    },
                    controlled,
                );
            }
            return;
        }
        if !matches!(self.kind(c), Kind::Verb(_)) {
            self.noun_phrase(c, Case::Object);
            return;
        }
        let subject_arg = self.subject_arg(c);
        if controlled {
            let form = if form == Form::Finite {
                Form::Infinitive
            } else {
                form
            };
            // "to throw the ball and [to] stop him": a second infinitive drops its "to".
            self.clause(c, form, subject_arg, false);
        } else {
            if let Some(s) = self.subject_node(c) {
                self.noun_phrase(s, Case::Object);
            }
            self.clause(c, Form::Ing, subject_arg, false);
        }
    }

    /// A non-core role of a clause or of a coordination of clauses.
    fn modifier(&mut self, l: &Link, subject: Option<usize>) {
        let c = match l.target {
            Target::Node(c) => c,
            Target::Const(_) => return, // polarity, mode, quant, wiki: not words here
        };
        if l.inverse {
            self.relative(l, c, subject);
            return;
        }
        if matches!(l.role, "name" | "wiki" | "quant" | "polarity" | "mode") {
            return;
        }
        if self.is_clausal(c) {
            if self.mentioned[c] || !l.tree {
                return;
            }
            let controlled = subject.is_some() && self.event_subject(c) == subject;
            let (word, form) = match (l.role, controlled) {
                ("time", true) => ("while", Form::Ing),
                ("time", false) => ("while", Form::Finite),
                ("purpose", true) => ("", Form::Infinitive),
                ("purpose", false) => ("so that", Form::Finite),
                ("manner", true) => ("", Form::Ing),
                ("manner", false) => ("as", Form::Finite),
                ("cause", _) => ("because", Form::Finite),
                ("condition", _) => ("if", Form::Finite),
                ("concession", _) => ("although", Form::Finite),
                (_, true) => ("", Form::Ing),
                (_, false) => ("as", Form::Finite),
            };
            self.word(word);
            if form == Form::Finite {
                self.finite_event(c);
            } else {
                self.event(c, form, true);
            }
            return;
        }
        match self.kind(c) {
            Kind::Preposition(_) | Kind::PrepositionFrame(_) => self.prepositional(c),
            Kind::Adjective(adj) => {
                self.mentioned[c] = true;
                self.adverb(adj, l.role == "manner");
            }
            Kind::Noun
                if !self.lex.is(self.concept(c), class::PERSON)
                    && (self.lex.is(self.concept(c), class::ADJECTIVE)
                        || words::is_adverb(self.concept(c)))
                    && self.is_simple(c, 0) =>
            {
                self.mentioned[c] = true;
                let word = self.concept(c);
                self.adverb(word, l.role == "manner");
            }
            _ => {
                let prep = if l.role == "location" {
                    words::location_preposition(self.head_concept(c))
                } else {
                    words::role_preposition(l.role)
                };
                self.word(prep);
                self.noun_phrase(c, Case::Object);
            }
        }
    }

    /// The subject of an event, or of the first event of a coordination.
    fn event_subject(&self, c: usize) -> Option<usize> {
        match self.kind(c) {
            Kind::Coordination(_) => self.ops(c).first().and_then(|&op| self.subject_node(op)),
            _ => self.subject_node(c),
        }
    }

    fn finite_event(&mut self, c: usize) {
        match self.kind(c) {
            Kind::Coordination(conj) => self.coordinated_clauses(c, conj),
            _ => self.clause(c, Form::Finite, None, false),
        }
    }

    fn adverb(&mut self, concept: &str, manner: bool) {
        let word = Self::surface(concept);
        if manner && !words::is_adverb(concept) {
            let adverb = if let Some(stem) = word.strip_suffix('y') {
                format!("{stem}ily")
            } else if let Some(stem) = word.strip_suffix("le") {
                format!("{stem}ly")
            } else if word.ends_with("ic") {
                format!("{word}ally")
            } else {
                format!("{word}ly")
            };
            self.word(&adverb);
        } else {
            self.word(&word);
        }
    }

    /// `(n / next-to :op1 (c / car))` → "next to a car"; `near-02 :ARG2` → "near the water".
    fn prepositional(&mut self, c: usize) {
        if self.mentioned[c] {
            return;
        }
        self.prepositional_phrase(c);
    }

    fn prepositional_phrase(&mut self, c: usize) {
        self.mentioned[c] = true;
        let (prep, object_role) = match self.kind(c) {
            Kind::Preposition(p) => (p, "op1"),
            Kind::PrepositionFrame(p) => (p, "ARG2"),
            _ => return,
        };
        self.word(prep);
        let tree = self.tree;
        let links = tree.links(c);
        let mut first = true;
        for l in links
            .iter()
            .filter(|l| !l.inverse && l.role.starts_with("op") || l.role == object_role)
        {
            if let Some(o) = l.node() {
                if !first {
                    self.word("and");
                }
                first = false;
                self.noun_phrase(o, Case::Object);
            }
        }
        for l in links
            .iter()
            .filter(|l| !(l.role.starts_with("op") || l.role.starts_with("ARG")) || l.inverse)
        {
            self.modifier(l, None);
        }
    }

    /// An inverse role on `head`'s side: `(m / man :ARG0-of (w / wear-01 ...))` as
    /// "wearing ...", `:ARG1-of (t / throw-01 :ARG0 ...)` as "thrown by ...".
    fn relative(&mut self, l: &Link, c: usize, head: Option<usize>) {
        if self.mentioned[c] || !l.tree {
            return;
        }
        let plural = head.is_some_and(|h| self.is_plural(h));
        match (self.kind(c), l.arg()) {
            (Kind::Verb("have"), Some(0)) => {
                // "a man with a basketball"
                self.mentioned[c] = true;
                self.word("with");
                let tree = self.tree;
                let links = tree.links(c);
                for k in links {
                    match k.arg() {
                        Some(1) if !k.inverse => {
                            if let Some(o) = k.node() {
                                self.noun_phrase(o, Case::Object);
                            }
                        }
                        Some(0) if !k.inverse => {}
                        _ => self.modifier(k, head),
                    }
                }
            }
            (Kind::Verb("have-rel-role" | "have-org-role"), Some(0)) => {
                self.mentioned[c] = true; // realized as the head noun
            }
            (Kind::Verb("include"), Some(1)) => {
                self.mentioned[c] = true;
                self.word("among");
                if let Some(o) = self.arg_node(c, 2) {
                    self.noun_phrase(o, Case::Object);
                }
            }
            (Kind::Verb("include"), Some(2)) => {
                self.mentioned[c] = true;
                self.word("including");
                if let Some(o) = self.arg_node(c, 1) {
                    self.noun_phrase(o, Case::Object);
                }
            }
            (Kind::Verb(lemma), Some(1)) => {
                let passive =
                    self.arg_node(c, 0).is_some() || !self.lex.is(lemma, class::INTRANSITIVE);
                self.clause(
                    c,
                    if passive { Form::Passive } else { Form::Ing },
                    Some(1),
                    plural,
                );
            }
            (Kind::Verb(_), Some(0)) => self.clause(c, Form::Ing, Some(0), plural),
            (Kind::Verb(_) | Kind::Adjective(_) | Kind::PrepositionFrame(_), Some(a)) => {
                if a >= 2 {
                    self.word("that");
                    self.clause(c, Form::Finite, Some(a), plural);
                } else if let Kind::PrepositionFrame(_) = self.kind(c) {
                    self.prepositional(c);
                } else {
                    self.word("that");
                    self.clause(c, Form::Finite, Some(a), plural);
                }
            }
            (Kind::Verb(_) | Kind::Adjective(_), None) => {
                self.word(match l.role {
                    "location" => "where",
                    "time" => "when",
                    _ => "that",
                });
                self.clause(c, Form::Finite, None, false);
            }
            _ => {
                self.word("with");
                self.noun_phrase(c, Case::Object);
            }
        }
    }

    // ---------------------------------------------------------------- noun phrases

    /// Realizes node `n` as a noun phrase; returns whether it is plural.
    fn noun_phrase(&mut self, n: usize, case: Case) -> bool {
        self.noun_phrase_with(n, case, NounOptions::default())
    }

    fn noun_phrase_with(&mut self, n: usize, case: Case, options: NounOptions) -> bool {
        if self.mentioned[n] {
            return self.mention(n, case);
        }
        if self.depth > MAX_DEPTH {
            self.word(&Self::surface(self.concept(n)));
            return false;
        }
        self.depth += 1;
        self.mentioned[n] = true;
        let plural = match self.kind(n) {
            Kind::Coordination(conj) => {
                let ops = self.ops(n);
                for (i, &op) in ops.iter().enumerate() {
                    if i > 0 {
                        self.list_separator(i, ops.len(), conj);
                    }
                    self.noun_phrase(op, case);
                }
                if ops.is_empty() {
                    self.word(conj);
                }
                self.is_plural(n)
            }
            Kind::Verb(_) | Kind::Adjective(_) => {
                self.mentioned[n] = false;
                self.event(n, Form::Ing, false);
                false
            }
            Kind::Preposition(_) | Kind::PrepositionFrame(_) => {
                self.prepositional_phrase(n);
                false
            }
            Kind::Pronoun => self.pronoun(n, case),
            Kind::MultiSentence => {
                let parts: Vec<usize> = self.ops_or_sentences(n);
                for (i, &part) in parts.iter().enumerate() {
                    if i > 0 {
                        self.word("and");
                    }
                    self.noun_phrase(part, case);
                }
                false
            }
            Kind::Noun => self.noun(n, options),
        };
        self.depth -= 1;
        plural
    }

    fn ops_or_sentences(&self, n: usize) -> Vec<usize> {
        self.tree
            .links(n)
            .iter()
            .filter(|l| !l.inverse && (l.role.starts_with("snt") || l.role.starts_with("op")))
            .filter_map(Link::node)
            .collect()
    }

    fn pronoun(&mut self, n: usize, case: Case) -> bool {
        let Some((subject, object, possessive, plural)) = words::pronoun(self.concept(n)) else {
            return false;
        };
        self.word(match case {
            Case::Subject => subject,
            Case::Object => object,
            Case::Possessive => possessive,
        });
        plural
    }

    /// A node already realized: "the dog", "his", "she".
    fn mention(&mut self, n: usize, case: Case) -> bool {
        if let Kind::Pronoun = self.kind(n) {
            return self.pronoun(n, case);
        }
        let plural = self.is_plural(n);
        if case == Case::Possessive {
            self.word(match (plural, self.gender(n)) {
                (true, _) | (false, Gender::Person) => "their",
                (false, Gender::Male) => "his",
                (false, Gender::Female) => "her",
                (false, Gender::Thing) => "its",
            });
            return plural;
        }
        match self.kind(n) {
            Kind::Noun => {
                if let Some(name) = self.name(n) {
                    self.word(&name);
                    return false;
                }
                let subject = case == Case::Subject;
                match (plural, self.gender(n)) {
                    (true, _) => self.word(if subject { "they" } else { "them" }),
                    (false, Gender::Male) => self.word(if subject { "he" } else { "him" }),
                    (false, Gender::Female) => self.word(if subject { "she" } else { "her" }),
                    (false, Gender::Thing) => self.word("it"),
                    (false, Gender::Person) => {
                        let head = self.head_concept(n);
                        self.word("the");
                        self.head(head, plural);
                    }
                }
            }
            Kind::Coordination(_) => self.word(if case == Case::Subject {
                "they"
            } else {
                "them"
            }),
            _ => self.word("it"),
        }
        plural
    }

    fn head(&mut self, concept: &str, plural: bool) {
        let word = Self::surface(concept);
        if plural && !self.lex.is(concept, class::MASS) && !words::plural_only(concept) {
            let plural = self.lex.plural(&word).into_owned();
            self.word(&plural);
        } else {
            self.word(&word);
        }
    }

    /// `:name (n / name :op1 "New" :op2 "York")` → "New York".
    fn name(&self, n: usize) -> Option<String> {
        let name = self.tree.child(n, "name")?;
        let mut text = String::new();
        for l in self
            .tree
            .links(name)
            .iter()
            .filter(|l| l.role.starts_with("op"))
        {
            if let Target::Const(c) = l.target {
                if !text.is_empty() {
                    text.push(' ');
                }
                text.push_str(unquote(c));
            }
        }
        (!text.is_empty()).then_some(text)
    }

    fn possessor(&mut self, p: usize) {
        if self.mentioned[p] || matches!(self.kind(p), Kind::Pronoun) {
            self.mention(p, Case::Possessive);
        } else {
            self.noun_phrase(p, Case::Object);
            self.word("'s");
        }
    }

    /// A common noun with its determiner, premodifiers and postmodifiers.
    fn noun(&mut self, n: usize, options: NounOptions) -> bool {
        if let Some(name) = self.name(n) {
            self.word(&name);
            return false;
        }
        let tree = self.tree;
        let links = tree.links(n);
        let role_noun = self.role_noun(n);
        let head = self.head_concept(n);
        let group = self.lex.is(head, class::GROUP);
        let counted = self.quantity(n).is_some();
        let plural = self.is_plural(n)
            || (options.bare_plural && !counted && !self.lex.is(head, class::MASS));

        // Determiner.
        let possessor = role_noun.and_then(|(_, of)| of).or_else(|| {
            links
                .iter()
                .find(|l| l.is("poss") || l.is("part-of"))
                .and_then(Link::node)
        });
        let mut determiner: Option<&str> = None;
        if self.negated(n) {
            determiner = Some("no");
        }
        for l in links {
            if let (false, "mod" | "quant", Some(m)) = (l.inverse, l.role, l.node()) {
                if let Some(d) = words::determiner(self.concept(m)) {
                    determiner = determiner.or(Some(d));
                    self.mentioned[m] = true;
                }
            }
        }
        let number = self.quantity(n);
        let article_at = self.out.len();
        if let Some(p) = possessor {
            self.possessor(p);
        } else if let Some(d) = determiner {
            self.word(d);
        }
        if let Some(q) = number {
            match words::number_word(q) {
                Some(w) => self.word(w),
                None => self.word(&q.to_string()),
            }
        }
        let needs_article = !options.bare_plural
            && possessor.is_none()
            && determiner.is_none()
            && number.is_none()
            && !plural
            && !self.lex.is(head, class::MASS);
        let premod_at = self.out.len();

        // Premodifiers: adjectives and participles, then nouns ("red soccer ball").
        let mut noun_premods: Vec<NounPremodifier> = Vec::new();
        for l in links {
            let Some(m) = l.node() else { continue };
            if self.mentioned[m] || !l.tree {
                continue;
            }
            let leaf = self.tree.links(m).is_empty();
            if l.is("mod") && self.is_simple(m, 0) {
                if self.is_adjectival(m) {
                    self.premodifier(m);
                } else {
                    noun_premods.push(NounPremodifier::Node(m));
                }
            } else if (l.is("consist-of") && !group || l.is("time"))
                && self.is_simple(m, 0)
                && matches!(self.kind(m), Kind::Noun)
            {
                // "a brick oven", "the morning newspaper"
                noun_premods.push(NounPremodifier::Node(m));
            } else if l.is("purpose") && leaf && matches!(self.kind(m), Kind::Verb(_)) {
                // "a cutting board", "a fishing line"
                if let Kind::Verb(v) = self.kind(m) {
                    self.mentioned[m] = true;
                    noun_premods.push(NounPremodifier::Gerund(v));
                }
            } else if l.inverse && leaf && !Self::is_generic_head(head) {
                if let Some(word) = self.participle_premodifier(l, m) {
                    self.mentioned[m] = true;
                    self.word(&word);
                }
            }
        }
        for premodifier in noun_premods {
            match premodifier {
                NounPremodifier::Node(m) => self.premodifier(m),
                NounPremodifier::Gerund(v) => {
                    let lex = self.lex;
                    self.word(&lex.present_participle(v));
                }
            }
        }
        if let Some((role, _)) = role_noun {
            self.mentioned[role] = true;
        }
        self.head(head, plural);
        if needs_article {
            let next = self.out[premod_at..].trim_start();
            let article = indefinite_article(next);
            let insert = if article_at == 0 || self.out[..article_at].ends_with(' ') {
                format!("{article} ")
            } else {
                format!(" {article}")
            };
            self.out.insert_str(article_at, &insert);
        }

        // Postmodifiers, in document order.
        let mut relatives = 0;
        for l in links {
            let Some(m) = l.node() else { continue };
            if self.mentioned[m] && l.tree && !l.inverse {
                continue;
            }
            if !l.tree && !l.inverse {
                continue; // re-entrant poss, part-of: already the determiner
            }
            if options.skip_locative && self.is_locative(l) {
                continue;
            }
            if l.is("consist-of") {
                if !self.mentioned[m] {
                    self.word("of");
                    self.noun_phrase_collective(m);
                }
                continue;
            }
            if l.is("part-of") || l.is("poss") {
                continue; // the determiner
            }
            if l.inverse {
                let before = self.out.len();
                if relatives > 0 && !self.mentioned[m] && l.tree {
                    self.word("and");
                }
                let with_and = self.out.len();
                self.relative(l, m, Some(n));
                if self.out.len() == with_and {
                    self.out.truncate(before);
                } else {
                    relatives += 1;
                }
                continue;
            }
            match l.role {
                "name" | "quant" | "polarity" | "wiki" => {}
                r if r.starts_with("op") || r.starts_with("ARG") => {
                    self.word("of");
                    self.noun_phrase(m, Case::Object);
                }
                _ => self.modifier(l, Some(n)),
            }
        }
        plural
    }

    /// The members of a group: "a group of young children", plural unless counted or mass.
    fn noun_phrase_collective(&mut self, m: usize) {
        let options = NounOptions {
            bare_plural: true,
            ..NounOptions::default()
        };
        self.noun_phrase_with(m, Case::Object, options);
    }

    fn is_adjectival(&self, m: usize) -> bool {
        let concept = self.concept(m);
        (self.lex.is(concept, class::ADJECTIVE) && !self.lex.is(concept, class::PERSON))
            || words::is_adverb(concept)
            || matches!(self.kind(m), Kind::Adjective(_))
    }

    fn premodifier(&mut self, m: usize) {
        self.mentioned[m] = true;
        let tree = self.tree;
        let links = tree.links(m);
        for l in links {
            if let Some(inner) = l.node() {
                self.premodifier(inner);
            }
        }
        let word = match self.kind(m) {
            Kind::Adjective(adj) | Kind::Verb(adj) => adj,
            _ => self.concept(m),
        };
        self.word(&Self::surface(word));
    }

    /// A bare inverse predicate before its noun: "red helmet", "smiling child", "parked cars".
    fn participle_premodifier(&self, l: &Link, m: usize) -> Option<String> {
        match (self.kind(m), l.arg()) {
            (Kind::Adjective(adj), Some(1)) => Some(adj.to_string()),
            (Kind::Verb(v), Some(0)) if !v.contains('-') => {
                Some(self.lex.present_participle(v).into_owned())
            }
            (Kind::Verb(v), Some(1)) if !v.contains('-') && v != "have" && v != "include" => {
                Some(if self.lex.is(v, class::INTRANSITIVE) {
                    self.lex.present_participle(v).into_owned()
                } else {
                    self.lex.past_participle(v).into_owned()
                })
            }
            _ => None,
        }
    }
}

/// How a noun phrase is shaped by its context.
#[derive(Clone, Copy, Debug, Default)]
struct NounOptions {
    /// Leave out `:location` modifiers (a copular root says them after "is").
    skip_locative: bool,
    /// The members after "a group of": plural and without article unless counted.
    bare_plural: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Subject,
    Object,
    Possessive,
}

/// AMR frames that are relations, not events: never realized as clauses of their own.
fn is_relation_frame(lemma: &str) -> bool {
    matches!(lemma, "have-rel-role" | "have-org-role")
}

fn unquote(c: &str) -> &str {
    c.strip_prefix('"')
        .and_then(|c| c.strip_suffix('"'))
        .unwrap_or(c)
}

/// Upper-cases the first letter at or after byte `start`.
fn capitalize_from(out: &mut String, start: usize) {
    let Some((i, ch)) = out[start..]
        .char_indices()
        .find(|(_, c)| !c.is_whitespace())
    else {
        return;
    };
    if ch.is_lowercase() {
        let upper: String = ch.to_uppercase().collect();
        out.replace_range(start + i..start + i + ch.len_utf8(), &upper);
    }
}
