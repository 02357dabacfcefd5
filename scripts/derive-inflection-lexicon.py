#!/usr/bin/env python3
"""Derives data/lexicon/wordnet-inflection.txt from WordNet 3.0 (Debian `wordnet-base`).

The built-in AMR realizer (src/amr/realize/) inflects words with regular rules in Rust and takes
everything irregular or lexical from this file. Sections, one entry per line:

  [verb-forms]   lemma participle present-participle
                 from verb.exc: the forms WordNet lists as exceptions for a lemma. The -ing form
                 is the exception ending in "ing" (running, lying); the past participle is the
                 lemma itself when its only past form swaps its "o"/"u" for "a" (came, ran),
                 else the exception with a "u" the lemma lacks (sung, begun), else one ending
                 in -en/-wn/-rn/-ne/-ain (ridden, thrown, worn, done, lain), else the shortest
                 past form not in -ed (sat, caught, spat); a lemma with a doubled -ing and no
                 past form at all keeps its own form (cut, put, set). "=" marks a regular form.
  [plurals]      lemma plural        noun.exc, irregular plurals of single-word nouns (not the
                                     doubled "busses" variants of a regular "-es")
  [intransitive] lemma               verbs whose most frequent sense (first in index.verb)
                                     has only intransitive sentence frames ("Somebody ----s")
  [adjectives]   lemma               single words WordNet knows as adjectives that are not
                                     verbs, or whose adjective senses are tagged more often
                                     than their verb senses (red, busy, happy; not open)
  [persons]      lemma               nouns whose first sense is in noun.person, and "person"
  [animals]      lemma               nouns whose first sense is in noun.animal
  [groups]       lemma               nouns whose first sense is in noun.group (crowd, family),
                                     and "group"
  [mass]         lemma               nouns whose first sense is in noun.substance or is a kind
                                     of sport (water, sand, soccer): no indefinite article

Only single, lower-case, alphabetic lemmas (and hyphenated ones for the noun lists) are kept.
"people" is added as the plural of "person", which WordNet lists as a noun of its own.

Usage: python3 scripts/derive-inflection-lexicon.py [/usr/share/wordnet] > data/lexicon/wordnet-inflection.txt
"""
import sys

TRANSITIVE_FRAMES = {8, 9, 10, 11, 14, 15, 16, 17, 18, 19, 20, 21, 24, 25, 30, 31}
LEXNAME = {"noun.act": 4, "noun.animal": 5, "noun.group": 14, "noun.person": 18,
           "noun.substance": 27}


def plain(word, hyphen=False):
    letters = word.replace("-", "") if hyphen else word
    return letters.isalpha() and word.islower() and letters.isascii()


def read_index(root, pos):
    """lemma -> (synset offsets in frequency order, tagged sense count)"""
    entries = {}
    with open(f"{root}/index.{pos}", encoding="utf-8") as index:
        for line in index:
            if line.startswith(" "):
                continue
            fields = line.split()
            synsets = int(fields[2])
            pointers = int(fields[3])
            tagged = int(fields[5 + pointers])
            entries[fields[0]] = (fields[-synsets:], tagged)
    return entries


def read_data(root, pos):
    """offset -> (lexicographer file number, words, hypernym offsets, frames per word)"""
    synsets = {}
    with open(f"{root}/data.{pos}", encoding="utf-8") as data:
        for line in data:
            if line.startswith(" "):
                continue
            fields = line.split("|")[0].split()
            offset, lexfile = fields[0], int(fields[1])
            words_count = int(fields[3], 16)
            words = [fields[4 + 2 * i].lower() for i in range(words_count)]
            at = 4 + 2 * words_count
            pointer_count = int(fields[at])
            hypernyms = []
            for p in range(pointer_count):
                symbol, target = fields[at + 1 + 4 * p], fields[at + 2 + 4 * p]
                if symbol in ("@", "@i"):
                    hypernyms.append(target)
            at += 1 + 4 * pointer_count
            frames = {}
            if pos == "verb" and at < len(fields):
                frame_count = int(fields[at])
                for f in range(frame_count):
                    number = int(fields[at + 2 + 3 * f])
                    word = int(fields[at + 3 + 3 * f], 16)
                    frames.setdefault(word, set()).add(number)
            synsets[offset] = (lexfile, words, hypernyms, frames)
    return synsets


def read_exceptions(root, pos):
    """lemma -> inflected forms"""
    forms = {}
    with open(f"{root}/{pos}.exc", encoding="utf-8") as exc:
        for line in exc:
            fields = line.split()
            if len(fields) < 2:
                continue
            for lemma in fields[1:]:
                forms.setdefault(lemma, []).append(fields[0])
    return forms


def participle(lemma, forms):
    past = [f for f in forms if not f.endswith("ing") and not f.endswith("s")]
    if not past:
        return None
    if len(past) == 1 and len(past[0]) == len(lemma):
        changed = [(a, b) for a, b in zip(past[0], lemma) if a != b]
        if len(changed) == 1 and changed[0][0] == "a" and changed[0][1] in "ou":
            return lemma
    with_u = [f for f in past if "u" in f and "u" not in lemma]
    if with_u:
        return with_u[0]
    with_n = [f for f in past if f.endswith(("en", "wn", "rn", "ne", "ain"))]
    if with_n:
        return min(with_n, key=len)
    plain_past = [f for f in past if not f.endswith("ed")]
    return min(plain_past or past, key=lambda f: (len(f), f))


def verb_forms(root):
    lines = []
    for lemma, forms in sorted(read_exceptions(root, "verb").items()):
        if not plain(lemma):
            continue
        forms = [f for f in forms if plain(f)]
        ing = next((f for f in forms if f.endswith("ing")), None)
        part = participle(lemma, forms)
        if part is None and ing is not None and ing.endswith(lemma[-1] * 2 + "ing"):
            # A doubled -ing without any past form: the past is the lemma (cut, put, set).
            part = lemma
        if ing is None and part is None:
            continue
        lines.append(f"{lemma} {part or '='} {ing or '='}")
    return lines


def plurals(root):
    lines = []
    for lemma, forms in sorted(read_exceptions(root, "noun").items()):
        if not plain(lemma):
            continue
        # "busses", "gasses": WordNet's doubled variants of a regular -es plural.
        forms = sorted(f for f in forms if plain(f) and f != lemma and f != lemma + lemma[-1] + "es")
        if forms:
            lines.append(f"{lemma} {forms[0]}")
    lines.append("person people")
    return sorted(set(lines))


def first_sense_frames(lemma, offsets, verbs):
    lexfile, words, _, frames = verbs[offsets[0]]
    position = words.index(lemma) + 1 if lemma in words else 0
    return frames.get(0, set()) | frames.get(position, set())


def intransitive(verb_index, verbs):
    found = []
    for lemma, (offsets, _) in verb_index.items():
        if not plain(lemma):
            continue
        frames = first_sense_frames(lemma, offsets, verbs)
        if frames and not frames & TRANSITIVE_FRAMES:
            found.append(lemma)
    return sorted(found)


def adjectives(adj_index, verb_index):
    found = []
    for lemma, (_, tagged) in adj_index.items():
        if not plain(lemma):
            continue
        if lemma not in verb_index or tagged > verb_index[lemma][1]:
            found.append(lemma)
    return sorted(found)


def descends_from(offset, ancestor, nouns, seen=None):
    seen = set() if seen is None else seen
    if offset == ancestor:
        return True
    if offset in seen or offset not in nouns:
        return False
    seen.add(offset)
    return any(descends_from(h, ancestor, nouns, seen) for h in nouns[offset][2])


def noun_classes(noun_index, nouns):
    classes = {name: [] for name in ("persons", "animals", "groups", "mass")}
    sport = noun_index["sport"][0][0]
    # "person" and "group" themselves are in noun.Tops.
    person, group = noun_index["person"][0][0], noun_index["group"][0][0]
    for lemma, (offsets, _) in noun_index.items():
        if not plain(lemma, hyphen=True):
            continue
        lexfile = nouns[offsets[0]][0]
        if lexfile == LEXNAME["noun.person"] or offsets[0] == person:
            classes["persons"].append(lemma)
        elif lexfile == LEXNAME["noun.animal"]:
            classes["animals"].append(lemma)
        elif lexfile == LEXNAME["noun.group"] or offsets[0] == group:
            classes["groups"].append(lemma)
        elif lexfile == LEXNAME["noun.substance"] or (
            lexfile == LEXNAME["noun.act"] and descends_from(offsets[0], sport, nouns)
        ):
            classes["mass"].append(lemma)
    return {name: sorted(words) for name, words in classes.items()}


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/wordnet"
    verb_index, adj_index = read_index(root, "verb"), read_index(root, "adj")
    noun_index = read_index(root, "noun")
    verbs, nouns = read_data(root, "verb"), read_data(root, "noun")
    sections = [
        ("verb-forms", verb_forms(root)),
        ("plurals", plurals(root)),
        ("intransitive", intransitive(verb_index, verbs)),
        ("adjectives", adjectives(adj_index, verb_index)),
    ]
    sections += list(noun_classes(noun_index, nouns).items())
    out = ["# Derived from WordNet 3.0 (see LICENSE-WordNet.txt) by "
           "scripts/derive-inflection-lexicon.py; do not edit."]
    for name, lines in sections:
        out.append(f"[{name}]")
        out.extend(lines)
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
