"""Translated editions of the student release: English is the source, translations live beside it.

translations/<lang>/ holds, per language:
  <NN_chapter>.json  each markdown cell of that chapter's student notebook, keyed by cell id
  grader.json        what the release's grader shows around a check (status words, labels, phrases, every public
                     check's one-line description keyed by check id) and the README's Colab route
  README.md          the student README, its first line naming the English it was made from
  glossary.md        the terms every translation uses
Each translation records the hash of the English it was made from (en_sha), so an English edit shows as stale.

  store.py     the files' format: read, write, hash
  sources.py   what English there is to translate, as units (file, key, text)
  checks.py    what is wrong with a language's translations: missing, stale, orphaned, numbers or code lost
  localize.py  turn a built English release into the translated one (fails on any problem)
  cli.py       `python -m grader translate`: --check, --todo, --apply, --prune
"""
