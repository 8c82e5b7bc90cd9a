"""Tokenizer and TF-IDF vectoriser shared by similarity and the baseline provider."""

from __future__ import annotations

import numpy as np
import pytest

from worker_service.lexical import (
    MAX_TEXT_CHARS,
    clean_text,
    cosine_rows,
    fit_tfidf,
    humanize_identifier,
    stem,
    tfidf_vectors,
    tokenize,
    tokenize_with_surface,
)

pytestmark = pytest.mark.unit


def test_splits_snake_kebab_and_camel_case() -> None:
    """Identifiers in every common style yield the same words as prose."""
    assert tokenize("list_todos") == ["list", "todo"]
    assert tokenize("listTodos") == ["list", "todo"]
    assert tokenize("list-todos") == ["list", "todo"]
    assert tokenize("HTTPServerError") == ["http", "server", "error"]


def test_drops_stopwords_and_single_letters_but_keeps_digits() -> None:
    """Stopwords and stray letters are noise; digits such as "3" in "s3" survive."""
    assert tokenize("Lists the buckets in a region") == ["list", "bucket", "region"]
    assert tokenize("x 7 y") == ["7"]
    assert tokenize("list_s3_buckets") == ["list", "s3", "bucket"]


def test_stemmer_is_conservative() -> None:
    """Plurals are folded while words that merely end in s are left alone."""
    assert stem("todos") == "todo"
    assert stem("searches") == "search"
    assert stem("queries") == "query"
    assert [stem(w) for w in ("status", "class", "analysis", "bus")] == ["status", "class", "analysis", "bus"]


def test_unicode_words_are_kept_and_casefolded() -> None:
    """Non-ASCII scripts tokenise as words, casefolded after NFKC normalisation."""
    assert tokenize("Crée une tâche") == ["crée", "une", "tâche"]
    assert tokenize("\uff26\uff35\uff2c\uff2c width") == ["full", "width"]
    assert tokenize("Поиск задач") == ["поиск", "задач"]
    assert tokenize("STRASSE Straße") == ["strasse", "strasse"]


def test_surface_forms_accompany_terms() -> None:
    """Evidence can show the word as written while matching uses the stem."""
    assert tokenize_with_surface("Searches todos") == [("search", "searches"), ("todo", "todos")]


def test_hostile_text_never_raises() -> None:
    """Lone surrogates, NULs, control characters, non-strings and huge inputs are all accepted."""
    assert tokenize("\ud800bad\x00 text\u202e") == ["bad", "text"]
    assert tokenize(None) == []
    assert tokenize(12345) == []
    huge = "word " * 1_000_000
    assert len(tokenize(huge)) == MAX_TEXT_CHARS // 5
    assert clean_text("\udfff") == "?"
    assert tokenize("") == []
    assert tokenize("🙂🙂🙂 ... ___") == []


def test_humanize_identifier() -> None:
    """Names become lower-case words separated by spaces."""
    assert humanize_identifier("searchTodos") == "search todos"
    assert humanize_identifier("rag_iris_global_graphrag") == "rag iris global graphrag"
    assert humanize_identifier("") == ""


def test_tfidf_rows_are_l2_normalised_and_zero_for_empty_docs() -> None:
    """Rows have unit norm, a document without terms is a zero row, and values are finite."""
    vecs = tfidf_vectors(["list todos by status", "search todos by keyword", "", "the of and"])
    assert vecs.dtype == np.float32
    norms = np.linalg.norm(vecs, axis=1)
    assert norms[:2] == pytest.approx([1.0, 1.0], abs=1e-6)
    assert norms[2:] == pytest.approx([0.0, 0.0])
    assert np.isfinite(vecs).all()


def test_rare_terms_weigh_more_than_common_ones() -> None:
    """IDF gives a term in every document less weight than a term in one document."""
    model = fit_tfidf([["todo", "list"], ["todo", "search"], ["todo", "delete"]])
    assert model.idf[model.vocabulary["todo"]] < model.idf[model.vocabulary["search"]]


def test_sublinear_tf() -> None:
    """Repeating a term raises its weight logarithmically, not linearly."""
    model = fit_tfidf([["a1", "b1"]])
    row = model.transform([["a1", "a1", "a1", "a1", "b1"]])[0]
    ratio = row[model.vocabulary["a1"]] / row[model.vocabulary["b1"]]
    assert ratio == pytest.approx(1.0 + np.log(4.0), rel=1e-5)


def test_max_features_keeps_the_most_frequent_terms_deterministically() -> None:
    """The vocabulary cap keeps the highest document frequencies, ties broken alphabetically."""
    docs = [["common", "zeta"], ["common", "alpha"], ["common", "beta"]]
    model = fit_tfidf(docs, max_features=2)
    assert sorted(model.vocabulary) == ["alpha", "common"]
    assert model.transform([["unknown"]]).sum() == 0.0


def test_cosine_rows_clips_to_unit_interval() -> None:
    """Opposite vectors score 0, not -1, and identical ones 1."""
    a = np.array([[1.0, 0.0], [-1.0, 0.0]], dtype=np.float32)
    sims = cosine_rows(a, a)
    assert sims.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_tfidf_is_deterministic() -> None:
    """The same texts produce bit-identical vectors."""
    texts = ["Searches todos by keyword", "Lists todos filtered by status", "Deletes a todo by ID"]
    assert np.array_equal(tfidf_vectors(texts), tfidf_vectors(texts))
