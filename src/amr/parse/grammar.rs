//! The caption grammar: a deterministic recursive-descent reading of one sentence into a tree
//! of AMR nodes (with re-entrancies), each node tied to the word that expresses it.
//!
//! A sentence is a clause (subject noun phrase, predicate, then clause-level modifiers), a
//! `there is` sentence, or a bare noun phrase. Noun phrases collect determiners, numbers,
//! adjectives, participles and nouns up to their head noun, then take possessive `'s`, `of`,
//! prepositional phrases, participle phrases and relative clauses. Which words are verbs is
//! decided by position: a word that can be a verb and agrees with the subject ends the subject
//! (`A man plays`, `Two men fish`); after the verb the same word is a noun (`a fruit stand`).

use super::lexicon::{ParseLexicon, Subject, VerbForm};
use super::words::{self, lookup};

pub type NodeId = usize;

#[derive(Clone, Debug)]
pub enum Target {
    /// A node this edge owns: written nested under the edge.
    Own(NodeId),
    /// A node owned elsewhere: written as its variable (a re-entrancy).
    Ref(NodeId),
    /// A constant (`2`, `-`, `imperative`) with the token that expresses it.
    Const(String, Option<usize>),
}

#[derive(Clone, Debug)]
pub struct Node {
    pub concept: String,
    pub token: Option<usize>,
    /// Roles with their colon; `:ARG0-of` for an inverse edge owned by this node.
    pub edges: Vec<(String, Target)>,
    /// For pronoun resolution and agreement.
    pub plural: bool,
    pub person: bool,
}

/// One word of the sentence: lower-cased, with the index of its (first) token.
#[derive(Clone, Debug)]
pub struct Word {
    pub text: String,
    pub token: usize,
}

/// Where a noun phrase stands: in the subject before the verb, PPs attach to the noun and a
/// verb agreeing with it ends it; elsewhere PPs attach to the verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ctx {
    Subject,
    Object,
}

pub struct Grammar<'a> {
    lex: &'a ParseLexicon,
    words: &'a [Word],
    at: usize,
    pub nodes: Vec<Node>,
    /// Let any verb-capable word end a subject, whatever the agreement (second pass).
    relaxed: bool,
    /// The subject of the main clause, and pronoun nodes made so far: antecedents.
    antecedents: Vec<NodeId>,
    /// Whether the main clause's verb has been read: before it, a verb that agrees ends any
    /// noun phrase (`A cyclist wearing a red helmet rides ...`).
    main_verb: bool,
    /// The number of the main clause's subject, once read: a verb after a PP in the subject
    /// agrees with it (`Two men in a boat hold ...`).
    subject_plural: Option<bool>,
}

/// What a prepositional phrase becomes.
enum PrepRel {
    /// The object under this role.
    Role(&'static str),
    /// `:role (concept :op1 object)`.
    Op(&'static str, &'static str),
    /// `:location (near-02 :ARG2 object)`.
    Near,
    /// `:ARG0-of (wear-01 :ARG1 object)` on a noun.
    Wear,
    /// `:ARG0-of (have-03 :ARG1 object)` on a noun.
    Have,
}

impl<'a> Grammar<'a> {
    pub fn new(lex: &'a ParseLexicon, words: &'a [Word], relaxed: bool) -> Self {
        Grammar {
            lex,
            words,
            at: 0,
            nodes: Vec::new(),
            relaxed,
            antecedents: Vec::new(),
            main_verb: false,
            subject_plural: None,
        }
    }

    // ---- cursor -------------------------------------------------------------------------

    fn word(&self, i: usize) -> &'a str {
        self.words.get(i).map_or("", |w| w.text.as_str())
    }

    fn peek(&self) -> &'a str {
        self.word(self.at)
    }

    fn peek_at(&self, k: usize) -> &'a str {
        self.word(self.at + k)
    }

    fn token(&self) -> usize {
        self.words.get(self.at).map_or(0, |w| w.token)
    }

    fn done(&self) -> bool {
        self.at >= self.words.len()
    }

    // ---- nodes --------------------------------------------------------------------------

    fn node(&mut self, concept: impl Into<String>, token: Option<usize>) -> NodeId {
        self.nodes.push(Node {
            concept: concept.into(),
            token,
            edges: Vec::new(),
            plural: false,
            person: false,
        });
        self.nodes.len() - 1
    }

    fn edge(&mut self, from: NodeId, role: impl Into<String>, to: Target) {
        self.nodes[from].edges.push((role.into(), to));
    }

    fn has_edge(&self, from: NodeId, role: &str) -> bool {
        self.nodes[from].edges.iter().any(|(r, _)| r == role)
    }

    // ---- word classes -------------------------------------------------------------------

    fn is_closed(&self, w: &str) -> bool {
        words::DETERMINERS.contains(&w)
            || lookup(words::POSSESSIVES, w).is_some()
            || lookup(words::PRONOUNS, w).is_some()
            || words::BE.contains(&w)
            || words::PREPOSITIONS.contains(&w)
            || lookup(words::SUBORDINATORS, w).is_some()
            || words::RELATIVES.contains(&w)
            || words::AUXILIARIES.contains(&w)
            || matches!(
                w,
                "and"
                    | "or"
                    | "but"
                    | "not"
                    | "n't"
                    | "no"
                    | "to"
                    | "there"
                    | "'"
                    | "has"
                    | "have"
                    | "while"
                    | "never"
            )
            || !w.chars().any(char::is_alphanumeric)
            || lookup(words::ADVERBS, w).is_some()
            || self.adverb(w).is_some()
    }

    /// The adjective of an `-ly` adverb (`carefully` → `careful`); not for adjectives in
    /// `-ly` (`lonely`).
    fn adverb(&self, w: &str) -> Option<String> {
        let stem = w.strip_suffix("ly")?;
        if self.lex.is_adjective(w) {
            return None;
        }
        [
            stem.to_string(),
            format!("{stem}e"),
            stem.strip_suffix('i')
                .map(|s| format!("{s}y"))
                .unwrap_or_default(),
        ]
        .into_iter()
        .find(|a| a.len() > 2 && self.lex.is_adjective(a))
    }

    /// The adjective a word is (`older` → `old`), when it is one.
    fn adjective(&self, w: &str) -> Option<String> {
        if self.lex.is_adjective(w) {
            return Some(w.to_string());
        }
        for suffix in ["er", "est"] {
            if let Some(stem) = w.strip_suffix(suffix) {
                let doubled = stem.len() > 2
                    && stem.as_bytes()[stem.len() - 1] == stem.as_bytes()[stem.len() - 2];
                let candidates = [
                    stem.to_string(),
                    format!("{stem}e"),
                    stem.strip_suffix('i')
                        .map(|s| format!("{s}y"))
                        .unwrap_or_default(),
                    if doubled {
                        stem[..stem.len() - 1].to_string()
                    } else {
                        String::new()
                    },
                ];
                if let Some(c) = candidates
                    .into_iter()
                    .find(|c| !c.is_empty() && self.lex.is_adjective(c))
                {
                    return Some(c);
                }
            }
        }
        None
    }

    /// The verb lemma and form, unless the word is far more often a noun and `strict`.
    fn verb(&self, w: &str) -> Option<(String, VerbForm)> {
        if self.is_closed(w) {
            return None;
        }
        self.lex.verb(w)
    }

    fn verb_likely(&self, lemma: &str) -> bool {
        let (noun, verb) = self.lex.verb_weight(lemma);
        verb * 8 >= noun
    }

    /// Whether word `i` can start a noun phrase.
    fn starts_np(&self, i: usize) -> bool {
        let w = self.word(i);
        if w.is_empty() {
            return false;
        }
        words::DETERMINERS.contains(&w)
            || lookup(words::POSSESSIVES, w).is_some()
            || lookup(words::PRONOUNS, w).is_some()
            || words::number(w).is_some()
            || words::QUANTIFIERS.contains(&w)
            || !self.is_closed(w)
    }

    /// Whether word `i` is a finite verb that can follow a subject of this number.
    fn finite_verb_at(&self, i: usize, plural: bool) -> bool {
        let w = self.word(i);
        if words::BE.contains(&w) && w != "'s" {
            return true;
        }
        if matches!(w, "has" | "have") || words::AUXILIARIES.contains(&w) {
            return true;
        }
        let Some((lemma, form)) = self.verb(w) else {
            return false;
        };
        if self.adjective(w).is_some() && form != VerbForm::Third {
            return false;
        }
        if self.relaxed {
            // Something must follow the verb: `A brown dog and a white dog race through ...`,
            // but not `A soccer ball .`
            let followed = self.word(i + 1).chars().any(char::is_alphanumeric);
            return match form {
                VerbForm::Ing => false,
                VerbForm::Base => followed && self.verb_likely(&lemma),
                VerbForm::Third | VerbForm::Past => self.verb_likely(&lemma),
            };
        }
        let agrees = match form {
            VerbForm::Third => !plural,
            VerbForm::Base => plural,
            VerbForm::Past => true,
            VerbForm::Ing => false,
        };
        agrees && (form == VerbForm::Third || self.verb_likely(&lemma))
    }

    // ---- sentences ----------------------------------------------------------------------

    /// Parses the whole sentence; the top node, or `None` for a sentence with no content word.
    pub fn sentence(&mut self) -> Option<NodeId> {
        self.skip_punctuation();
        while matches!(self.peek(), "and" | "but" | "so" | "then" | "or") {
            self.at += 1;
            self.skip_punctuation();
        }
        let top = self.clause_or_np();
        let top = self.reported_speech(top);
        // Anything left (a second sentence, trailing fragments) joins with `and` when it parses.
        let mut rest = Vec::new();
        while !self.done() {
            let before = self.at;
            self.skip_punctuation();
            if matches!(self.peek(), "and" | "but" | "or") {
                self.at += 1;
            }
            if let Some(node) = self.clause_or_np() {
                rest.push(node);
            }
            if self.at == before {
                self.at += 1;
            }
        }
        match (top, rest.is_empty()) {
            (Some(top), true) => Some(top),
            (Some(top), false) => {
                let and = self.node("and", None);
                self.edge(and, ":op1", Target::Own(top));
                for (k, node) in rest.into_iter().enumerate() {
                    self.edge(and, format!(":op{}", k + 2), Target::Own(node));
                }
                Some(and)
            }
            (None, _) => rest.into_iter().next(),
        }
    }

    /// `" ... , " said the fox`: the quoted clause is the `:ARG1` of `say-01` (or the verb
    /// that reports it) and the speaker its `:ARG0`.
    fn reported_speech(&mut self, quoted: Option<NodeId>) -> Option<NodeId> {
        let save = self.at;
        self.skip_punctuation();
        let w = self.peek();
        let Some((lemma, VerbForm::Past | VerbForm::Third)) = self.verb(w) else {
            self.at = save;
            return quoted;
        };
        if !words::REPORTING.contains(&lemma.as_str()) || self.at == save && quoted.is_some() {
            self.at = save;
            return quoted;
        }
        let token = self.token();
        self.at += 1;
        let Some(speaker) = self.np(Ctx::Object, false) else {
            self.at = save;
            return quoted;
        };
        let concept = self.lex.frame_concept(&lemma).into_owned();
        let verb = self.node(concept, Some(token));
        self.edge(verb, ":ARG0", Target::Own(speaker));
        if let Some(q) = quoted {
            self.edge(verb, ":ARG1", Target::Own(q));
        }
        self.verb_modifiers(verb);
        Some(verb)
    }

    fn skip_punctuation(&mut self) {
        while !self.done() && !self.peek().chars().any(char::is_alphanumeric) {
            self.at += 1;
        }
    }

    fn clause_or_np(&mut self) -> Option<NodeId> {
        if self.peek() == "there" && words::BE.contains(&self.peek_at(1)) {
            self.at += 2;
            let np = self.np_coordinated(Ctx::Subject)?;
            self.noun_postmodifiers_all(np);
            return Some(np);
        }
        // An imperative: a plain verb first that is no noun phrase (`Draw me a sheep !`).
        if let Some((lemma, VerbForm::Base)) = self.verb(self.peek()) {
            let (noun, verb) = self.lex.verb_weight(&lemma);
            if verb > noun
                && !self.starts_np_strongly(self.at)
                && !self.finite_verb_at(self.at + 1, true)
            {
                let you = self.node("you", None);
                let verb = self.verb_phrase(Some((you, true)), Voice::Active);
                self.edge(verb, ":mode", Target::Const("imperative".into(), None));
                return Some(self.clause_tail(verb, you));
            }
        }
        let start = self.at;
        let subject = self.np_coordinated(Ctx::Subject)?;
        if self.antecedents.is_empty() {
            self.antecedents.push(subject);
        }
        match self.predicate(subject) {
            Some(top) => Some(self.clause_tail(top, subject)),
            None => {
                if self.at == start {
                    return None;
                }
                self.noun_postmodifiers_all(subject);
                Some(subject)
            }
        }
    }

    /// A word that is clearly a noun phrase start: a determiner, number or pronoun.
    fn starts_np_strongly(&self, i: usize) -> bool {
        let w = self.word(i);
        words::DETERMINERS.contains(&w)
            || lookup(words::POSSESSIVES, w).is_some()
            || lookup(words::PRONOUNS, w).is_some()
            || words::number(w).is_some()
    }

    /// The predicate of `subject`: a verb phrase, a copula, or `None` when no verb follows.
    fn predicate(&mut self, subject: NodeId) -> Option<NodeId> {
        let w = self.peek();
        if w.is_empty() {
            return None;
        }
        let mut negated = None;
        // Auxiliaries: `does not`, `can`, `will`.
        if words::AUXILIARIES.contains(&w) {
            self.at += 1;
            if matches!(self.peek(), "not" | "n't" | "never") {
                negated = Some(self.token());
                self.at += 1;
            }
        }
        // Adverbs before the verb: `carefully places`.
        let mut adverbs = Vec::new();
        while let Some(adj) = self.adverb(self.peek()) {
            adverbs.push((adj, self.token()));
            self.at += 1;
        }
        let top = self.predicate_after_adverbs(subject, negated)?;
        for (adj, token) in adverbs {
            let node = self.node(adj, Some(token));
            self.edge(top, ":manner", Target::Own(node));
        }
        Some(top)
    }

    fn predicate_after_adverbs(
        &mut self,
        subject: NodeId,
        mut negated: Option<usize>,
    ) -> Option<NodeId> {
        let w = self.peek();
        if words::BE.contains(&w) {
            self.at += 1;
            if matches!(self.peek(), "not" | "n't") {
                negated = Some(self.token());
                self.at += 1;
            }
            let top = self.after_be(subject)?;
            if let Some(t) = negated {
                self.edge(top, ":polarity", Target::Const("-".into(), Some(t)));
            }
            return Some(top);
        }
        let plural = self.nodes[subject].plural;
        if !self.finite_verb_at(self.at, plural) && negated.is_none() {
            // A participle phrase after the subject with a finite verb later: a reduced
            // relative (`A climber attached to a rope reaches ...`).
            if let Some((_, VerbForm::Past | VerbForm::Ing)) = self.verb(w) {
                let later = (self.at + 1..self.words.len()).any(|i| self.finite_verb_at(i, plural));
                if later {
                    self.participle(subject);
                    self.noun_postmodifiers(subject, Ctx::Subject);
                    return self.predicate(subject);
                }
            }
            return None;
        }
        if let Some((_, VerbForm::Past)) = self.verb(w) {
            let plural = self.nodes[subject].plural;
            let later = (self.at + 1..self.words.len()).any(|i| self.finite_verb_at(i, plural));
            if later {
                self.participle(subject);
                self.noun_postmodifiers(subject, Ctx::Subject);
                return self.predicate(subject);
            }
        }
        let verb = self.verb_phrase(Some((subject, false)), Voice::Active);
        if let Some(t) = negated {
            self.edge(verb, ":polarity", Target::Const("-".into(), Some(t)));
        }
        Some(verb)
    }

    /// After `is`/`are`: progressive, passive, adjective, noun or place.
    fn after_be(&mut self, subject: NodeId) -> Option<NodeId> {
        let w = self.peek();
        if let Some((_, form)) = self.verb(w) {
            if form == VerbForm::Ing {
                return Some(self.verb_phrase(Some((subject, false)), Voice::Active));
            }
            if form == VerbForm::Past && self.adjective(w).is_none() {
                return Some(self.verb_phrase(Some((subject, false)), Voice::Passive));
            }
        }
        if words::PREPOSITIONS.contains(&w) {
            self.verb_modifiers(subject);
            return Some(subject);
        }
        // `so weak`, `too heavy`, `very happy`.
        let degree = (matches!(w, "so" | "too" | "very" | "really" | "quite")
            && self.adjective(self.peek_at(1)).is_some())
        .then(|| {
            self.at += 1;
            (w, self.words[self.at - 1].token)
        });
        let w = self.peek();
        if let Some(adj) = self
            .adjective(w)
            .filter(|_| !self.noun_follows(self.at + 1))
        {
            let token = self.token();
            self.at += 1;
            let mut top = self.predicate_adjective(&adj, token, Target::Own(subject));
            if let Some((degree, t)) = degree {
                let d = self.node(degree, Some(t));
                self.edge(top, ":degree", Target::Own(d));
            }
            // `is happy and excited`: one node per adjective under `and`.
            while self.peek() == "and" && self.adjective(self.peek_at(1)).is_some() {
                let and_token = self.token();
                self.at += 1;
                let token = self.token();
                let adj = self.adjective(self.peek()).unwrap_or_default();
                self.at += 1;
                let other = self.predicate_adjective(&adj, token, Target::Ref(subject));
                top = self.coordinate(top, other, "and", and_token);
            }
            return Some(top);
        }
        if words::PREPOSITIONS.contains(&w) {
            self.verb_modifiers(subject);
            return Some(subject);
        }
        if self.starts_np(self.at) {
            let np = self.np_coordinated(Ctx::Object)?;
            self.edge(np, ":domain", Target::Own(subject));
            self.noun_postmodifiers(np, Ctx::Object);
            return Some(np);
        }
        None
    }

    /// `happy-01 :ARG1 subject` for an adjective AMR writes as a frame, else
    /// `big :domain subject`.
    fn predicate_adjective(&mut self, adj: &str, token: usize, subject: Target) -> NodeId {
        // `unhappy`: `happy-01 :polarity -`.
        if let Some(stem) = adj.strip_prefix("un").filter(|s| self.lex.is_adjective(s)) {
            let node = self.predicate_adjective(stem, token, subject);
            self.edge(node, ":polarity", Target::Const("-".into(), Some(token)));
            return node;
        }
        match self.lex.adjective_frame(adj) {
            Some(frame) => {
                let node = self.node(frame, Some(token));
                self.edge(node, ":ARG1", subject);
                node
            }
            None => {
                let node = self.node(adj, Some(token));
                self.edge(node, ":domain", subject);
                node
            }
        }
    }

    /// Whether a noun follows at `i` (so the adjective before it modifies that noun).
    fn noun_follows(&self, i: usize) -> bool {
        let w = self.word(i);
        !w.is_empty()
            && !self.is_closed(w)
            && self.adjective(w).is_none()
            && self
                .verb(w)
                .is_none_or(|(l, f)| f == VerbForm::Base && !self.verb_likely(&l))
    }

    /// Clause-level continuations of a clause whose top is `top` and subject `subject`:
    /// coordinated verb phrases, subordinate clauses, purposes, participles.
    fn clause_tail(&mut self, top: NodeId, subject: NodeId) -> NodeId {
        let mut top = top;
        let main = top;
        loop {
            let w = self.peek();
            if w.is_empty() {
                break;
            }
            if w == "," {
                self.at += 1;
                continue;
            }
            if matches!(w, "and" | "or") {
                let next = self.peek_at(1);
                let is_verb = self.verb(next).is_some_and(|(l, f)| {
                    f != VerbForm::Past && (self.verb_likely(&l) || f == VerbForm::Third)
                }) && !self.starts_np_strongly(self.at + 1);
                if is_verb || words::BE.contains(&next) {
                    let conj_token = self.token();
                    self.at += 1;
                    let second = if words::BE.contains(&next) {
                        self.at += 1;
                        self.after_be_ref(subject)
                    } else {
                        Some(self.verb_phrase(Some((subject, true)), Voice::Active))
                    };
                    if let Some(second) = second {
                        top = self.coordinate(top, second, w, conj_token);
                    }
                    continue;
                }
                // A second clause with its own subject.
                let save = self.at;
                self.at += 1;
                let conj_token = self.words[save].token;
                if let Some(other_subject) = self.np_coordinated(Ctx::Subject) {
                    if let Some(pred) = self.predicate(other_subject) {
                        let pred = self.clause_tail(pred, other_subject);
                        top = self.coordinate(top, pred, w, conj_token);
                        continue;
                    }
                }
                self.at = save;
                break;
            }
            if let Some(role) = lookup(words::SUBORDINATORS, w) {
                self.at += 1;
                let before = self.at;
                if let Some(sub) = self.np_coordinated(Ctx::Subject) {
                    if let Some(pred) = self.predicate(sub) {
                        let pred = self.clause_tail_inner(pred, sub);
                        self.edge(main, role, Target::Own(pred));
                        continue;
                    }
                }
                self.at = before;
                continue;
            }
            if w == "to" && self.purpose_clause(main, subject) {
                continue;
            }
            if let Some((_, VerbForm::Ing)) = self.verb(w) {
                let mut manner = self.verb_phrase(Some((subject, true)), Voice::Active);
                // `, sharing sandwiches and laughing`
                while self.peek() == "and"
                    && matches!(self.verb(self.peek_at(1)), Some((_, VerbForm::Ing)))
                {
                    let token = self.token();
                    self.at += 1;
                    let other = self.verb_phrase(Some((subject, true)), Voice::Active);
                    manner = self.coordinate(manner, other, "and", token);
                }
                self.edge(main, ":manner", Target::Own(manner));
                continue;
            }
            let before = self.at;
            self.verb_modifiers(main);
            if self.at == before {
                break;
            }
        }
        top
    }

    /// `to` + a base verb at the cursor: the verb phrase, with `subject` as its own, becomes
    /// `main`'s `:ARG1` when `main` controls it (`wants to eat`), else its `:purpose`. Returns
    /// whether it was one.
    fn purpose_clause(&mut self, main: NodeId, subject: NodeId) -> bool {
        if !matches!(self.verb(self.peek_at(1)), Some((_, VerbForm::Base))) {
            return false;
        }
        self.at += 1;
        let purpose = self.verb_phrase(Some((subject, true)), Voice::Active);
        let role = if self.controls(main) {
            ":ARG1"
        } else {
            ":purpose"
        };
        self.edge(main, role, Target::Own(purpose));
        true
    }

    /// The tail of a subordinate clause: like [`Self::clause_tail`] but it stops at a
    /// subordinator or `and` that belongs to the main clause.
    fn clause_tail_inner(&mut self, top: NodeId, subject: NodeId) -> NodeId {
        let main = top;
        loop {
            let w = self.peek();
            if w == "to" && self.purpose_clause(main, subject) {
                continue;
            }
            let before = self.at;
            if !matches!(w, "and" | "or" | ",") && lookup(words::SUBORDINATORS, w).is_none() {
                self.verb_modifiers(main);
            }
            if self.at == before {
                break;
            }
        }
        top
    }

    fn controls(&self, verb: NodeId) -> bool {
        let concept = &self.nodes[verb].concept;
        let lemma = concept
            .rsplit_once('-')
            .map_or(concept.as_str(), |(l, _)| l);
        words::CONTROL_VERBS.contains(&lemma) && !self.has_edge(verb, ":ARG1")
    }

    fn after_be_ref(&mut self, subject: NodeId) -> Option<NodeId> {
        // The second predicate of `X is A and is B` refers back to the subject.
        let shadow = self.node(self.nodes[subject].concept.clone(), None);
        let top = self.after_be(shadow)?;
        for node in &mut self.nodes {
            for (_, t) in &mut node.edges {
                if matches!(t, Target::Own(n) if *n == shadow) {
                    *t = Target::Ref(subject);
                }
            }
        }
        Some(top)
    }

    fn coordinate(&mut self, first: NodeId, second: NodeId, conj: &str, token: usize) -> NodeId {
        if self.nodes[first].concept == conj && self.nodes[first].token.is_some() {
            let n = self.nodes[first]
                .edges
                .iter()
                .filter(|(r, _)| r.starts_with(":op"))
                .count();
            self.edge(first, format!(":op{}", n + 1), Target::Own(second));
            return first;
        }
        let node = self.node(conj, Some(token));
        self.edge(node, ":op1", Target::Own(first));
        self.edge(node, ":op2", Target::Own(second));
        node
    }

    // ---- verb phrases -------------------------------------------------------------------

    /// A verb phrase at the cursor (its verb first): the frame node with its subject (owned,
    /// or a re-entrancy when `Some((s, true))`), particle, objects and modifiers.
    fn verb_phrase(&mut self, subject: Option<(NodeId, bool)>, voice: Voice) -> NodeId {
        let w = self.peek();
        let token = self.token();
        let lemma = self.verb(w).map_or_else(|| w.to_string(), |(l, _)| l);
        self.at += 1;
        let concept = self.lex.frame_concept(&lemma).into_owned();
        let verb = self.node(concept, Some(token));
        self.main_verb = true;
        if let Some((s, shared)) = subject {
            let role = match voice {
                Voice::Active => self.lex.subject(&lemma).role(),
                Voice::Passive => Subject::Arg1.role(),
            };
            let target = if shared {
                Target::Ref(s)
            } else {
                Target::Own(s)
            };
            self.edge(verb, role, target);
        }
        self.verb_complements(verb, voice);
        verb
    }

    /// Objects and modifiers of a verb (also of a participle).
    fn verb_complements(&mut self, verb: NodeId, voice: Voice) {
        if matches!(self.peek(), "not" | "n't") {
            let t = self.token();
            self.at += 1;
            self.edge(verb, ":polarity", Target::Const("-".into(), Some(t)));
        }
        // A particle: `climbs up a wall`, `looks away`.
        if matches!(
            self.peek(),
            "up" | "down" | "out" | "off" | "away" | "back" | "over"
        ) && self.peek_at(1) != "and"
            && !(self.peek() == "down" && self.starts_np_strongly(self.at + 1))
            && !(self.peek() == "over" && self.starts_np_strongly(self.at + 1))
        {
            let t = self.token();
            let w = self.peek();
            self.at += 1;
            let p = self.node(w, Some(t));
            self.edge(verb, ":direction", Target::Own(p));
        }
        if voice == Voice::Active && self.starts_np(self.at) {
            if let Some(object) = self.np_coordinated(Ctx::Object) {
                self.noun_postmodifiers(object, Ctx::Object);
                // A second object: `hands the woman a bunch`.
                let second = if self.starts_np_strongly(self.at) {
                    self.np_coordinated(Ctx::Object)
                } else {
                    None
                };
                match second {
                    Some(second) => {
                        self.noun_postmodifiers(second, Ctx::Object);
                        self.edge(verb, ":ARG2", Target::Own(object));
                        self.edge(verb, ":ARG1", Target::Own(second));
                    }
                    None => self.edge(verb, ":ARG1", Target::Own(object)),
                }
            }
        }
        loop {
            let before = self.at;
            if voice == Voice::Passive && self.peek() == "by" && self.starts_np(self.at + 1) {
                self.at += 1;
                if let Some(agent) = self.np_coordinated(Ctx::Object) {
                    self.noun_postmodifiers(agent, Ctx::Object);
                    self.edge(verb, ":ARG0", Target::Own(agent));
                }
            }
            self.verb_modifiers(verb);
            if self.at == before {
                break;
            }
        }
    }

    /// Prepositional phrases and adverbs attached to a verb (or, after `is`, to the subject).
    fn verb_modifiers(&mut self, host: NodeId) {
        let w = self.peek();
        if w.is_empty() {
            return;
        }
        if let Some(role) = lookup(words::ADVERBS, w) {
            // `down the street` is a preposition, `up` before a noun phrase too.
            let fixed = matches!((w, self.peek_at(1)), ("back" | "up", "and"));
            if !(fixed || words::PREPOSITIONS.contains(&w) && self.starts_np(self.at + 1)) {
                let t = self.token();
                self.at += 1;
                let node = self.node(w, Some(t));
                self.edge(host, role, Target::Own(node));
                return;
            }
        }
        if let Some(adj) = self.adverb(w) {
            let t = self.token();
            self.at += 1;
            let node = self.node(adj, Some(t));
            self.edge(host, ":manner", Target::Own(node));
            return;
        }
        // Fixed phrases: `back and forth`, `side by side`.
        let phrase = match (w, self.peek_at(1), self.peek_at(2)) {
            ("back", "and", "forth") => Some((":direction", "back-and-forth")),
            ("side", "by", "side") => Some((":manner", "side-by-side")),
            ("up", "and", "down") => Some((":direction", "up-and-down")),
            _ => None,
        };
        if let Some((role, concept)) = phrase {
            let t = self.token();
            self.at += 3;
            let node = self.node(concept, Some(t));
            self.edge(host, role, Target::Own(node));
            return;
        }
        if matches!(w, "not" | "n't") {
            let t = self.token();
            self.at += 1;
            self.edge(host, ":polarity", Target::Const("-".into(), Some(t)));
            return;
        }
        if !words::PREPOSITIONS.contains(&w) || w == "of" {
            return;
        }
        if w == "to"
            && self
                .verb(self.peek_at(1))
                .is_some_and(|(_, f)| f == VerbForm::Base)
            && !self.starts_np_strongly(self.at + 1)
        {
            return;
        }
        self.prepositional_phrase(host, true);
    }

    /// A PP at the cursor attached to `host` (a verb when `on_verb`, else a noun).
    fn prepositional_phrase(&mut self, host: NodeId, on_verb: bool) -> bool {
        let start = self.at;
        let token = self.token();
        let (prep, length) = match (self.peek(), self.peek_at(1), self.peek_at(2)) {
            ("next", "to", _) => ("next-to", 2),
            ("in", "front", "of") => ("in-front-of", 3),
            ("on", "top", "of") => ("on-top-of", 3),
            ("close", "to", _) => ("close-to", 2),
            ("out", "of", _) => ("out-of", 2),
            (p, _, _) if p != "next" => match words::PREPOSITIONS.iter().find(|q| **q == p) {
                Some(q) => (*q, 1),
                None => return false,
            },
            _ => return false,
        };
        self.at += length;
        let Some(object) = self.np_coordinated(Ctx::Object) else {
            self.at = start;
            return false;
        };
        self.noun_postmodifiers(object, Ctx::Object);
        let animate = self.nodes[object].person || self.is_animate(object);
        let clothing = self.is_clothing(object);
        let rel = match prep {
            "in" | "with" if clothing && (!on_verb || self.nodes[host].person) => PrepRel::Wear,
            "with" if !on_verb => PrepRel::Have,
            "with" if animate => PrepRel::Role(":accompanier"),
            "with" => PrepRel::Role(":instrument"),
            "in" | "on" | "at" | "during" if self.is_time(object) => PrepRel::Role(":time"),
            "in" | "on" | "at" | "by" | "atop" | "upon" | "within" => PrepRel::Role(":location"),
            "near" | "close-to" => PrepRel::Near,
            "beside" | "next-to" => PrepRel::Op(":location", "next-to"),
            "through" | "down" | "along" | "throughout" => PrepRel::Role(":path"),
            "across" | "past" | "around" => PrepRel::Op(":path", prep),
            "toward" | "towards" | "up" => PrepRel::Role(":direction"),
            "into" | "onto" => PrepRel::Role(":destination"),
            "from" | "out-of" | "off" => PrepRel::Role(":source"),
            "for" if animate => PrepRel::Role(":beneficiary"),
            "for" => PrepRel::Role(":purpose"),
            "to" if animate => PrepRel::Role(":ARG2"),
            "to" => PrepRel::Role(":destination"),
            "during" => PrepRel::Role(":time"),
            "after" | "before" => PrepRel::Op(":time", prep),
            "about" => PrepRel::Role(":topic"),
            "like" => PrepRel::Role(":mod"),
            "without" => PrepRel::Role(":manner"),
            other => PrepRel::Op(":location", other),
        };
        match rel {
            PrepRel::Role(role) => self.edge(host, role, Target::Own(object)),
            PrepRel::Op(role, concept) => {
                let p = self.node(concept, Some(token));
                self.edge(p, ":op1", Target::Own(object));
                self.edge(host, role, Target::Own(p));
            }
            PrepRel::Near => {
                let p = self.node("near-02", Some(token));
                self.edge(p, ":ARG2", Target::Own(object));
                self.edge(host, ":location", Target::Own(p));
            }
            PrepRel::Wear | PrepRel::Have => {
                let concept = if matches!(rel, PrepRel::Wear) {
                    "wear-01"
                } else {
                    "have-03"
                };
                let p = self.node(concept, Some(token));
                self.edge(p, ":ARG1", Target::Own(object));
                self.edge(host, ":ARG0-of", Target::Own(p));
            }
        }
        true
    }

    fn is_time(&self, node: NodeId) -> bool {
        words::TIMES.contains(&self.nodes[node].concept.as_str())
    }

    fn is_clothing(&self, node: NodeId) -> bool {
        let n = &self.nodes[node];
        if n.concept == "and" {
            return n.edges.iter().any(|(r, t)| {
                r.starts_with(":op") && matches!(t, Target::Own(c) if self.is_clothing(*c))
            });
        }
        self.lex.is_clothing(&n.concept)
    }

    fn is_animate(&self, node: NodeId) -> bool {
        let n = &self.nodes[node];
        n.person || self.lex.is_animate(&n.concept)
    }

    /// A participle phrase after a noun: `wearing a hat` (`:ARG0-of`), `thrown by a man`
    /// (`:ARG1-of`), `parked on the street`.
    fn participle(&mut self, noun: NodeId) {
        let Some((lemma, form)) = self.verb(self.peek()) else {
            return;
        };
        let voice = if form == VerbForm::Past {
            Voice::Passive
        } else {
            Voice::Active
        };
        let token = self.token();
        self.at += 1;
        let verb = self.node(self.lex.frame_concept(&lemma).into_owned(), Some(token));
        let role = match voice {
            Voice::Active => self.lex.subject(&lemma).role(),
            Voice::Passive => ":ARG1",
        };
        self.edge(noun, format!("{role}-of"), Target::Own(verb));
        self.verb_complements(verb, voice);
    }

    // ---- noun phrases -------------------------------------------------------------------

    /// Noun phrases joined by `and`/`or` (and commas), as an `and` node.
    fn np_coordinated(&mut self, ctx: Ctx) -> Option<NodeId> {
        let first = self.np(ctx, false)?;
        let mut items = vec![first];
        let mut conj = None;
        loop {
            let w = self.peek();
            let comma = w == "," && self.starts_np_strongly(self.at + 1);
            if !(comma || matches!(w, "and" | "or")) {
                break;
            }
            if !comma && !self.starts_np(self.at + 1) {
                break;
            }
            let save = self.at;
            let conj_token = self.token();
            self.at += 1;
            if comma && matches!(self.peek(), "and" | "or") {
                self.at += 1;
            }
            // `and` + a word that is a verb of the subject: a coordinated verb phrase.
            if ctx == Ctx::Object {
                let next = self.peek();
                if self.verb(next).is_some_and(|(l, f)| {
                    matches!(f, VerbForm::Third | VerbForm::Base) && self.verb_likely(&l)
                }) && !self.starts_np_strongly(self.at)
                {
                    self.at = save;
                    break;
                }
            }
            let Some(next) = self.np(ctx, true) else {
                self.at = save;
                break;
            };
            // `... and a woman stands`: a new clause, not a coordinated object.
            if ctx == Ctx::Object
                && self.main_verb
                && self.finite_verb_at(self.at, self.nodes[next].plural)
            {
                self.at = save;
                break;
            }
            if !comma {
                conj = Some((w, conj_token));
            }
            items.push(next);
        }
        if items.len() == 1 {
            return Some(first);
        }
        let (word, token) = conj.unwrap_or(("and", self.token()));
        let node = self.node(word, Some(token));
        for (k, item) in items.into_iter().enumerate() {
            self.edge(node, format!(":op{}", k + 1), Target::Own(item));
        }
        self.nodes[node].plural = true;
        Some(node)
    }

    /// One noun phrase (without its coordination): premodifiers, head, possessive `'s`, and
    /// the postmodifiers that always attach to the noun (`of`, participles, relatives; all
    /// PPs in the subject).
    fn np(&mut self, ctx: Ctx, plural_agreement: bool) -> Option<NodeId> {
        let start = self.at;
        let w = self.peek();
        if let Some(concept) = lookup(words::PRONOUNS, w) {
            let token = self.token();
            self.at += 1;
            let node = self.pronoun(concept, token);
            return Some(node);
        }
        let node = self.np_core(ctx, plural_agreement);
        let Some(mut node) = node else {
            self.at = start;
            return None;
        };
        if ctx == Ctx::Subject && !self.main_verb && self.subject_plural.is_none() {
            self.subject_plural = Some(self.nodes[node].plural || plural_agreement);
        }
        // `the dog 's owner`: the owner, possessed by the dog.
        while self.peek() == "'s"
            && self.starts_np(self.at + 1)
            && !self.finite_verb_at(self.at + 1, false)
        {
            self.at += 1;
            let Some(owned) = self.np_core(ctx, plural_agreement) else {
                break;
            };
            self.possess(owned, node);
            node = owned;
        }
        self.noun_postmodifiers(node, ctx);
        Some(node)
    }

    fn possess(&mut self, owned: NodeId, owner: NodeId) {
        // A relation noun: the owner is the other end of the relation.
        let rel = self.nodes[owned].edges.iter().find_map(|(r, t)| match t {
            Target::Own(n) if r == ":ARG0-of" && self.nodes[*n].concept == "have-rel-role-91" => {
                Some(*n)
            }
            _ => None,
        });
        match rel {
            Some(rel) => {
                let ap = self.nodes[rel]
                    .edges
                    .iter()
                    .position(|(r, _)| r == ":ARG2")
                    .unwrap_or(0);
                self.nodes[rel]
                    .edges
                    .insert(ap, (":ARG1".into(), Target::Own(owner)));
            }
            None => self.edge(owned, ":poss", Target::Own(owner)),
        }
    }

    fn pronoun(&mut self, concept: &str, token: usize) -> NodeId {
        if let Some(antecedent) = self.resolve(concept) {
            // A re-entrancy is written as a reference node that the builder merges.
            let node = self.node(concept, Some(token));
            self.nodes[node]
                .edges
                .push((":same-as".into(), Target::Ref(antecedent)));
            return node;
        }
        let node = self.node(concept, Some(token));
        self.nodes[node].person = matches!(
            concept,
            "i" | "you" | "he" | "she" | "we" | "someone" | "somebody" | "everyone" | "everybody"
        );
        self.nodes[node].plural = matches!(concept, "they" | "we");
        if matches!(concept, "he" | "she" | "it" | "they") {
            self.antecedents.push(node);
        }
        node
    }

    /// The antecedent of a third-person pronoun: an earlier pronoun of the same form, else
    /// the main subject when it agrees.
    fn resolve(&self, concept: &str) -> Option<NodeId> {
        if !matches!(concept, "he" | "she" | "it" | "they") {
            return None;
        }
        for &a in self.antecedents.iter().rev() {
            let n = &self.nodes[a];
            if n.concept == concept {
                return Some(a);
            }
            let fits = match concept {
                "he" | "she" => n.person && !n.plural,
                "it" => !n.person && !n.plural,
                _ => n.plural,
            };
            if fits && !matches!(n.concept.as_str(), "he" | "she" | "it" | "they") {
                return Some(a);
            }
        }
        None
    }

    /// Determiners, numbers, adjectives and nouns up to the head noun.
    fn np_core(&mut self, ctx: Ctx, plural_agreement: bool) -> Option<NodeId> {
        let start = self.at;
        let mut quant: Option<(Target, bool)> = None;
        let mut possessor: Option<(&str, usize)> = None;
        let mut negated = None;
        loop {
            let w = self.peek();
            if words::DETERMINERS.contains(&w) || (w == "that" && self.at == start) {
                self.at += 1;
            } else if w == "no" {
                negated = Some(self.token());
                self.at += 1;
            } else if let Some(p) = lookup(words::POSSESSIVES, w) {
                possessor = Some((p, self.token()));
                self.at += 1;
            } else if let Some(n) = words::number(w) {
                if w == "one" && self.peek_at(1) == "of" {
                    break;
                }
                quant = Some((Target::Const(n.to_string(), Some(self.token())), n != 1));
                self.at += 1;
            } else if words::QUANTIFIERS.contains(&w) {
                let node = self.node(w, Some(self.token()));
                quant = Some((Target::Own(node), true));
                self.at += 1;
            } else {
                break;
            }
        }
        // Premodifiers and nouns: (word index, kind).
        let mut items: Vec<(usize, Kind)> = Vec::new();
        let mut nouns = 0usize;
        loop {
            let i = self.at;
            let w = self.word(i);
            if w.is_empty() || self.is_closed(w) {
                break;
            }
            let next = self.word(i + 1);
            let next_nominal = !next.is_empty() && !self.is_closed(next);
            // `a family of four relaxes`: a number alone before the verb.
            // `the other chases`: adjectives alone before the verb.
            let bare = nouns == 0 && (quant.is_some() || !items.is_empty());
            if (nouns > 0 || bare) && (ctx == Ctx::Subject || !self.main_verb) {
                let plural = plural_agreement || self.plural_of(&items, quant.as_ref());
                let subject_agrees = self
                    .subject_plural
                    .is_some_and(|p| p != plural && self.finite_verb_at(i, p));
                if self.finite_verb_at(i, plural) || subject_agrees {
                    break;
                }
            }
            let verb = self.verb(w);
            // `parked cars`, `a smiling child`: participles before adjectives.
            let adjective = self
                .adjective(w)
                .filter(|_| !matches!(verb, Some((_, VerbForm::Ing | VerbForm::Past))));
            if let Some(adj) = adjective.filter(|_| next_nominal || nouns == 0) {
                // An adjective is a premodifier; at the end of the phrase it ends it.
                if !next_nominal {
                    if nouns == 0 && items.is_empty() {
                        break;
                    }
                    break;
                }
                items.push((i, Kind::Adjective(adj)));
            } else if let Some((lemma, form @ (VerbForm::Ing | VerbForm::Past))) = &verb {
                if !next_nominal || (nouns > 0 && !self.lex.is_adjective(w)) {
                    break;
                }
                items.push((i, Kind::Participle(lemma.clone(), *form)));
            } else {
                items.push((i, Kind::Noun));
                nouns += 1;
            }
            self.at += 1;
        }
        // The head is the last noun; words after it are not part of this phrase.
        let head_at = items.iter().rposition(|(_, k)| matches!(k, Kind::Noun));
        let Some(head_at) = head_at else {
            // `the other`, `the old`: an adjective after a determiner heads the phrase.
            let w = self.peek();
            if self.at > start
                && items.is_empty()
                && self.adjective(w).is_some()
                && !self.noun_follows(self.at + 1)
            {
                let token = self.token();
                self.at += 1;
                let node = self.node(w, Some(token));
                return Some(node);
            }
            // `a family of four`: a number alone counts people.
            let after_of = start > 0 && self.word(start - 1) == "of";
            if let (true, true, Some((q, _))) = (after_of, items.is_empty(), quant) {
                let node = self.node("person", None);
                self.nodes[node].person = true;
                self.nodes[node].plural = true;
                self.edge(node, ":quant", q);
                return Some(node);
            }
            self.at = start;
            return None;
        };
        self.at = items[head_at].0 + 1;
        items.truncate(head_at + 1);
        let (head_index, _) = items.pop()?;
        let head = self.head_noun(head_index, possessor.is_some());
        // `thirty minutes`: a temporal quantity.
        let unit = &self.nodes[head].concept;
        if words::TIME_UNITS.contains(&unit.as_str()) && items.is_empty() {
            if let Some((q @ Target::Const(..), _)) = quant {
                let quantity = self.node("temporal-quantity", None);
                self.edge(quantity, ":quant", q);
                self.edge(quantity, ":unit", Target::Own(head));
                return Some(quantity);
            }
        }
        let plural_word = {
            let (_, plural) = self.lex.noun_lemma(self.word(head_index));
            plural
        };
        self.nodes[head].plural = plural_word || quant.as_ref().is_some_and(|(_, p)| *p);
        // The frame of an agentive head takes a compound noun as its :ARG1.
        let agent_frame = self.nodes[head].edges.iter().find_map(|(r, t)| match t {
            Target::Own(n) if r == ":ARG0-of" && self.nodes[*n].concept != "have-rel-role-91" => {
                Some(*n)
            }
            _ => None,
        });
        for (i, kind) in items {
            let token = Some(self.words[i].token);
            let w = self.word(i).to_string();
            match kind {
                Kind::Adjective(adj) => {
                    if let Some(material) = lookup(words::MATERIALS, &adj) {
                        let m = self.node(material, token);
                        self.edge(head, ":consist-of", Target::Own(m));
                    } else if let Some(frame) = self.lex.adjective_frame(&adj) {
                        let a = self.node(frame, token);
                        self.edge(head, ":ARG1-of", Target::Own(a));
                    } else {
                        let a = self.node(adj, token);
                        self.edge(head, ":mod", Target::Own(a));
                    }
                }
                Kind::Participle(lemma, form) => {
                    let concept = self.lex.frame_concept(&lemma).into_owned();
                    let v = self.node(concept, token);
                    let role = if form == VerbForm::Past {
                        ":ARG1-of".to_string()
                    } else if self.is_animate(head) {
                        format!("{}-of", self.lex.subject(&lemma).role())
                    } else {
                        ":purpose".to_string()
                    };
                    self.edge(head, role, Target::Own(v));
                }
                Kind::Noun => {
                    let (lemma, _) = self.lex.noun_lemma(&w);
                    let lemma = lemma.into_owned();
                    if let Some(frame) = agent_frame {
                        let n = self.node(lemma, token);
                        self.edge(frame, ":ARG1", Target::Own(n));
                    } else if let Some(material) = lookup(words::MATERIALS, &lemma) {
                        let m = self.node(material, token);
                        self.edge(head, ":consist-of", Target::Own(m));
                    } else {
                        let n = self.node(lemma, token);
                        self.edge(head, ":mod", Target::Own(n));
                    }
                }
            }
        }
        if let Some((q, _)) = quant {
            self.edge(head, ":quant", q);
        }
        if let Some((concept, token)) = possessor {
            let owner = self.pronoun(concept, token);
            self.possess(head, owner);
        }
        if let Some(t) = negated {
            self.edge(head, ":polarity", Target::Const("-".into(), Some(t)));
        }
        Some(head)
    }

    fn plural_of(&self, items: &[(usize, Kind)], quant: Option<&(Target, bool)>) -> bool {
        if quant.is_some_and(|(_, p)| *p) {
            return true;
        }
        items
            .iter()
            .rev()
            .find(|(_, k)| matches!(k, Kind::Noun))
            .is_some_and(|(i, _)| self.lex.noun_lemma(self.word(*i)).1)
    }

    /// The node of a head noun: agentive nouns and relation nouns as AMR decomposes them.
    fn head_noun(&mut self, index: usize, possessed: bool) -> NodeId {
        let word = self.word(index).to_string();
        let token = Some(self.words[index].token);
        let (lemma, _) = self.lex.noun_lemma(&word);
        let lemma = lemma.into_owned();
        if let Some(verb) = self.lex.agentive(&lemma) {
            let person = self.node("person", token);
            let frame = self.node(self.lex.frame_concept(verb).into_owned(), token);
            self.edge(person, ":ARG0-of", Target::Own(frame));
            self.nodes[person].person = true;
            return person;
        }
        if words::RELATIONS.contains(&lemma.as_str())
            || (possessed && words::POSSESSED_RELATIONS.contains(&lemma.as_str()))
        {
            let person = self.node("person", None);
            let rel = self.node("have-rel-role-91", None);
            let role = self.node(lemma, token);
            self.edge(rel, ":ARG2", Target::Own(role));
            self.edge(person, ":ARG0-of", Target::Own(rel));
            self.nodes[person].person = true;
            return person;
        }
        let person = self.lex.is_person(&lemma);
        let node = self.node(lemma, token);
        self.nodes[node].person = person;
        node
    }

    /// The postmodifiers that attach to a noun in any position: `of`, participles, relative
    /// clauses, clothing; in the subject, every PP.
    fn noun_postmodifiers(&mut self, noun: NodeId, ctx: Ctx) {
        loop {
            let w = self.peek();
            if w == "of" && self.starts_np(self.at + 1) {
                let concept = self.nodes[noun].concept.clone();
                self.at += 1;
                let Some(object) = self.np_coordinated(Ctx::Object) else {
                    break;
                };
                let role = if words::CONTAINERS.contains(&concept.as_str()) {
                    ":consist-of"
                } else if words::PARTS.contains(&concept.as_str()) {
                    ":part-of"
                } else if words::DEPICTIONS.contains(&concept.as_str()) {
                    ":topic"
                } else {
                    ":poss"
                };
                self.edge(noun, role, Target::Own(object));
                continue;
            }
            if words::RELATIVES.contains(&w) && w != "where" {
                let next = self.peek_at(1);
                let starts_predicate = words::BE.contains(&next)
                    || self.verb(next).is_some_and(|(_, f)| f != VerbForm::Ing);
                if starts_predicate {
                    self.at += 1;
                    let shadow = self.node(self.nodes[noun].concept.clone(), None);
                    self.nodes[shadow].plural = self.nodes[noun].plural;
                    if let Some(pred) = self.predicate(shadow) {
                        self.attach_relative(noun, shadow, pred);
                        continue;
                    }
                    self.at -= 1;
                }
                break;
            }
            if let Some((_, form)) = self.verb(w) {
                // `wearing` and `dressed` are adjectives too, but not before an object or PP.
                let next = self.peek_at(1);
                let takes_complement =
                    self.starts_np_strongly(self.at + 1) || words::PREPOSITIONS.contains(&next);
                if matches!(form, VerbForm::Ing | VerbForm::Past)
                    && (self.adjective(w).is_none() || takes_complement)
                {
                    // In the subject, a past form may be the main verb (`A dog jumped`).
                    if form == VerbForm::Past && ctx == Ctx::Subject && next != "by" {
                        let plural = self.nodes[noun].plural;
                        let later =
                            (self.at + 1..self.words.len()).any(|i| self.finite_verb_at(i, plural));
                        if !later {
                            break;
                        }
                    }
                    if form == VerbForm::Ing
                        || words::PREPOSITIONS.contains(&self.peek_at(1))
                        || ctx == Ctx::Object
                        || self.peek_at(1).is_empty()
                    {
                        self.participle(noun);
                        continue;
                    }
                }
                break;
            }
            if matches!(w, "in" | "with") && ctx == Ctx::Object && self.is_animate(noun) {
                let save = self.at;
                let edges = self.nodes[noun].edges.len();
                if self.prepositional_phrase(noun, false) {
                    let last = self.nodes[noun]
                        .edges
                        .last()
                        .map(|(r, t)| (r.clone(), t.clone()));
                    let wear = matches!(&last, Some((r, Target::Own(n))) if r == ":ARG0-of" && self.nodes[*n].concept == "wear-01");
                    if wear {
                        continue;
                    }
                    self.nodes[noun].edges.truncate(edges);
                    self.at = save;
                }
                break;
            }
            if ctx == Ctx::Subject
                && words::PREPOSITIONS.contains(&w)
                && !(w == "to" && self.verb(self.peek_at(1)).is_some())
                && self.prepositional_phrase(noun, false)
            {
                continue;
            }
            break;
        }
    }

    /// After a bare noun phrase (a caption with no verb), every PP and participle attaches to it.
    fn noun_postmodifiers_all(&mut self, noun: NodeId) {
        loop {
            let before = self.at;
            self.noun_postmodifiers(noun, Ctx::Subject);
            let w = self.peek();
            if words::PREPOSITIONS.contains(&w) {
                self.prepositional_phrase(noun, false);
            } else if w == "," {
                self.at += 1;
            }
            if self.at == before {
                break;
            }
        }
    }

    /// Hangs a relative clause on its noun: the clause's edge to the stand-in subject becomes an
    /// inverse edge of the noun.
    fn attach_relative(&mut self, noun: NodeId, shadow: NodeId, pred: NodeId) {
        let role = self.nodes[pred]
            .edges
            .iter()
            .position(|(_, t)| matches!(t, Target::Own(n) if *n == shadow));
        match role {
            Some(k) => {
                let (role, _) = self.nodes[pred].edges.remove(k);
                self.edge(noun, format!("{role}-of"), Target::Own(pred));
            }
            None => {
                // `that is on the table`: the stand-in is the clause's top.
                let edges = std::mem::take(&mut self.nodes[shadow].edges);
                self.nodes[noun].edges.extend(edges);
            }
        }
        for node in &mut self.nodes {
            for (_, t) in &mut node.edges {
                if matches!(t, Target::Ref(n) if *n == shadow) {
                    *t = Target::Ref(noun);
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Voice {
    Active,
    Passive,
}

#[derive(Clone, Debug)]
enum Kind {
    Adjective(String),
    Participle(String, VerbForm),
    Noun,
}
