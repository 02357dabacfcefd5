#!/usr/bin/env python3
"""Derives data/lexicon/wordnet-modifiers.txt from WordNet 3.0 (Debian `wordnet-base`).

A word is listed when WordNet knows it as an adjective or adverb and either does not know it as a
noun, or its adjective+adverb senses are used more often in WordNet's tagged corpus than its noun
senses (ties broken by the number of synsets). Only single, lower-case, alphabetic lemmas are kept.
capflow uses the list to tell nouns from modifiers without a POS tagger (see src/amr/align.rs).

With --adjectives it derives data/lexicon/wordnet-adjectives.txt instead: the words of that list
that WordNet knows as adjectives with more adjective than adverb synsets (ties broken by the
number of tagged senses), i.e. the modifiers a tagger reading the bare word would call an
adjective rather than an adverb or preposition. The Flickr merge rules use it for "adjectives
never merge" (src/amr/merge.rs); prepositions and adverbs such as `above`, `across`, `back` are
not on it.

Usage: python3 scripts/derive-modifier-lexicon.py [/usr/share/wordnet] > data/lexicon/wordnet-modifiers.txt
       python3 scripts/derive-modifier-lexicon.py --adjectives [/usr/share/wordnet] \
           > data/lexicon/wordnet-adjectives.txt
"""
import sys


def load(root, pos):
    entries = {}
    with open(f"{root}/index.{pos}", encoding="utf-8") as index:
        for line in index:
            if line.startswith(" "):
                continue
            fields = line.split()
            pointer_count = int(fields[3])
            synsets = int(fields[2])
            tagged = int(fields[5 + pointer_count])
            entries[fields[0]] = (synsets, tagged)
    return entries


def adjectives_only(modifiers, adjectives, adverbs):
    kept = []
    for word in modifiers:
        if word not in adjectives:
            continue
        synsets, tagged = adjectives[word]
        adverb_synsets, adverb_tagged = adverbs.get(word, (0, 0))
        if synsets > adverb_synsets or (synsets == adverb_synsets and tagged > adverb_tagged):
            kept.append(word)
    return kept


def main():
    args = [a for a in sys.argv[1:] if a != "--adjectives"]
    root = args[0] if args else "/usr/share/wordnet"
    nouns, adjectives, adverbs = load(root, "noun"), load(root, "adj"), load(root, "adv")
    modifiers = []
    for word in sorted(set(adjectives) | set(adverbs)):
        if "_" in word or not word.isalpha() or not word.islower():
            continue
        tagged = adjectives.get(word, (0, 0))[1] + adverbs.get(word, (0, 0))[1]
        synsets = adjectives.get(word, (0, 0))[0] + adverbs.get(word, (0, 0))[0]
        if word in nouns:
            noun_synsets, noun_tagged = nouns[word]
            if tagged > noun_tagged or (tagged == noun_tagged and synsets > noun_synsets):
                modifiers.append(word)
        else:
            modifiers.append(word)
    if "--adjectives" in sys.argv[1:]:
        modifiers = adjectives_only(modifiers, adjectives, adverbs)
    sys.stdout.write("\n".join(modifiers) + "\n")


if __name__ == "__main__":
    main()
