#!/usr/bin/env python3
"""Derives the two lexicons of the built-in caption parser (src/amr/parse/).

data/lexicon/wordnet-parse.txt, from WordNet 3.0 (Debian `wordnet-base`), sections:

  [verbs]     lemma noun-count verb-count
              every single-word, lower-case, alphabetic verb lemma with the tagged sense counts
              (index.verb / index.noun, plus one for being listed) of its verb and noun senses,
              so the parser can tell "plays" the verb from "plays" the noun when the context
              allows both
  [agentive]  noun verb
              nouns whose first sense is in noun.person, spelled as a verb of the list plus an
              agentive suffix (-er, -r, -or, -ist, -ar, with a doubled consonant or dropped -e):
              "teacher teach", "cyclist cycle", "rider ride". AMR writes them as
              (p / person :ARG0-of (t / teach-01)).
  [clothing]  noun
              nouns whose first sense descends from clothing.n.01 or spectacles.n.01: "in a red
              shirt", "with glasses" are read as wear-01.

data/lexicon/amr-frames.txt, from public AMR releases (sense counts, no sentence text), sections:

  [frames]    lemma frame count subject-role bare-count
              for each word, the PropBank frame the AMR annotators used most often for it
              (`ride ride-01`, `jump jump-03`, `white white-03`), how often, how often the word
              was a concept of its own (`fresh`: an adjective written as :mod), and the role its
              subject takes: ARG1 when the frame was never seen with an :ARG0 but was seen with an
              :ARG1 (stand-01, sit-01: "the man stands" is :ARG1), else ARG0. The development
              captions, in-domain, count ten times.

The AMR sources (pass their paths): the Bio AMR corpus v0.8 (dev and test, publicly released by
ISI), the sentences of the Little Prince AMR bank v3.0 with more than 10 tokens (the shorter ones
are held out: they are what the parser is measured on), and the development split of capflow's
sample captions (examples/data/amr/captions.amr, images of flickr30k_entities/train.txt; the
val and test images are held out). Only concept names and their counts are kept.

Usage: python3 scripts/derive-parse-lexicon.py wordnet [/usr/share/wordnet] > data/lexicon/wordnet-parse.txt
       python3 scripts/derive-parse-lexicon.py frames BIO_DEV BIO_TEST LITTLE_PRINCE \
           examples/data/amr/captions.amr examples/data/flickr30k_entities/train.txt \
           > data/lexicon/amr-frames.txt
"""
import collections
import re
import sys


def plain(word):
    return word.isalpha() and word.islower() and word.isascii()


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


def read_nouns(root):
    """offset -> (lexicographer file number, hypernym offsets)"""
    synsets = {}
    with open(f"{root}/data.noun", encoding="utf-8") as data:
        for line in data:
            if line.startswith(" "):
                continue
            fields = line.split("|")[0].split()
            offset, lexfile = fields[0], int(fields[1])
            words_count = int(fields[3], 16)
            at = 4 + 2 * words_count
            hypernyms = []
            for p in range(int(fields[at])):
                symbol, target = fields[at + 1 + 4 * p], fields[at + 2 + 4 * p]
                if symbol in ("@", "@i"):
                    hypernyms.append(target)
            synsets[offset] = (lexfile, hypernyms)
    return synsets


def descends(offset, ancestors, nouns, seen):
    if offset in ancestors:
        return True
    if offset in seen or offset not in nouns:
        return False
    seen.add(offset)
    return any(descends(h, ancestors, nouns, seen) for h in nouns[offset][1])


NOUN_PERSON = 18


def agentive_stems(noun):
    """Verb spellings a noun.person noun may be built on."""
    for suffix in ("er", "ist"):
        if noun.endswith(suffix) and len(noun) > len(suffix) + 2:
            stem = noun[: -len(suffix)]
            yield stem
            yield stem + "e"
            if len(stem) > 2 and stem[-1] == stem[-2]:
                yield stem[:-1]
    if noun.endswith("r"):
        yield noun[:-1]


def wordnet(root):
    verbs, nouns_index = read_index(root, "verb"), read_index(root, "noun")
    nouns = read_nouns(root)
    out = ["# Derived from WordNet 3.0 (see LICENSE-WordNet.txt) by "
           "scripts/derive-parse-lexicon.py; do not edit.", "[verbs]"]
    for lemma, (offsets, tagged) in sorted(verbs.items()):
        if not plain(lemma):
            continue
        noun = nouns_index.get(lemma)
        noun_count = noun[1] + 1 if noun else 0
        out.append(f"{lemma} {noun_count} {tagged + 1}")
    out.append("[agentive]")
    for noun, (offsets, _) in sorted(nouns_index.items()):
        if not plain(noun) or nouns[offsets[0]][0] != NOUN_PERSON:
            continue
        stems = [s for s in agentive_stems(noun) if s != noun and s in verbs]
        if stems:
            out.append(f"{noun} {max(stems, key=lambda s: verbs[s][1])}")
    out.append("[clothing]")
    ancestors = {nouns_index["clothing"][0][0], nouns_index["spectacles"][0][0]}
    for noun, (offsets, _) in sorted(nouns_index.items()):
        if plain(noun) and descends(offsets[0], ancestors, nouns, set()):
            out.append(noun)
    return out


CONCEPT = re.compile(r"/\s*([a-z]+)-(\d\d)\b")
NODE = re.compile(r"\(\s*(\S+)\s*/\s*([^\s()~]+)")


def blocks(path):
    with open(path, encoding="utf-8") as f:
        for block in f.read().split("\n\n"):
            meta = dict(re.findall(r"# ::(\w+) ([^\n]*?)(?=\s*(?:# ::|$|\n))", block))
            graph = "\n".join(l for l in block.splitlines() if not l.startswith("#"))
            if graph.strip():
                yield meta, re.sub(r"~e\.[\d,]+", "", graph)


def frames(bio_dev, bio_test, little_prince, captions, train_ids):
    keep_images = {line.strip() for line in open(train_ids, encoding="utf-8") if line.strip()}
    graphs = []
    for path in (bio_dev, bio_test):
        graphs += [g for _, g in blocks(path)]
    graphs += [g for m, g in blocks(little_prince) if len(m.get("snt", "").split()) > 10]
    # The development captions are in-domain: each counts as ten graphs of the other sources.
    graphs += 10 * [g for m, g in blocks(captions) if m.get("id", "").split(".")[0] in keep_images]
    counts = collections.defaultdict(collections.Counter)
    # Per frame: nodes seen with an :ARG0, and nodes seen with an :ARG1 but no :ARG0.
    with_arg0, only_arg1 = collections.Counter(), collections.Counter()
    bare = collections.Counter()
    for graph in graphs:
        for _, concept in NODE.findall(graph):
            bare[concept] += 1
        for lemma, sense in CONCEPT.findall(graph):
            counts[lemma][f"{lemma}-{sense}"] += 1
        for var, concept in NODE.findall(graph):
            if not re.fullmatch(r"[a-z]+-\d\d", concept):
                continue
            roles = set(re.findall(r":(ARG[01])\s", node_body(graph, var)))
            # `:ARG0-of (var / frame` gives the frame its :ARG0 from the parent.
            opened = r":(ARG[01])-of\s+\(\s*" + re.escape(var) + r"\s*/"
            roles |= set(re.findall(opened, graph))
            if "ARG0" in roles:
                with_arg0[concept] += 1
            elif "ARG1" in roles:
                only_arg1[concept] += 1
    out = ["# Derived by scripts/derive-parse-lexicon.py from public AMR releases (Bio AMR v0.8 "
           "dev+test, Little Prince v3.0 sentences over 10 tokens) and capflow's development "
           "captions; do not edit.", "[frames]"]
    for lemma in sorted(counts):
        frame, count = counts[lemma].most_common(1)[0]
        subject = "ARG1" if only_arg1[frame] > with_arg0[frame] else "ARG0"
        out.append(f"{lemma} {frame} {count} {subject} {bare[lemma]}")
    return out


def node_body(graph, var):
    """The text of the node opened by `(var /`, its nested nodes cut out."""
    start = re.search(r"\(\s*" + re.escape(var) + r"\s*/", graph)
    if not start:
        return ""
    depth, body, i = 0, [], start.start()
    while i < len(graph):
        ch = graph[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                break
        elif depth == 1:
            body.append(ch)
        i += 1
    return "".join(body)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "wordnet":
        lines = wordnet(sys.argv[2] if len(sys.argv) > 2 else "/usr/share/wordnet")
    elif len(sys.argv) == 7 and sys.argv[1] == "frames":
        lines = frames(*sys.argv[2:])
    else:
        sys.exit(__doc__)
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
