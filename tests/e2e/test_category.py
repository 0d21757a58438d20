"""End to end: the shipped default model served under the taxonomy of version 2 answers each
intent's category (id and name) in Understand, and the dialog's call summary carries the main
intent's category. A model trained on an older list (its labels a prefix of the taxonomy's) is
served the same way. Expected values come from the taxonomy file (PyYAML) and the
model's labels.json, not from the server."""
import json

import pytest
import yaml

from dialog_harness import DEFAULT_MODEL, DialogServer, model_repo


@pytest.fixture(scope="module")
def dserver(tmp_path_factory):
    work = tmp_path_factory.mktemp("category")
    srv = DialogServer(work / "srv", model_repo(work / "models"), work / "srv" / "orders.sqlite",
                       name="category")
    yield srv
    rc = srv.stop()
    assert rc == 0, srv.log_path.read_text()[-4000:]


@pytest.fixture(scope="module")
def taxonomy():
    doc = yaml.safe_load((DEFAULT_MODEL / "taxonomy.yaml").read_text(encoding="utf-8"))
    return {i["id"]: i for i in doc["intents"]}, doc["categories"]


def test_understand_answers_the_category(dserver, taxonomy):
    intents, categories = taxonomy
    labels = json.loads((DEFAULT_MODEL / "labels.json").read_text(encoding="utf-8"))["intents"]
    assert len(intents) >= len(labels) and list(intents)[:len(labels)] == labels
    for text in ["我家停水了，天河区荷光路南一巷12号", "社保卡丢了怎么补办", "你好"]:
        status, j = dserver.http("/v1/understand", {"text": text})
        assert status == 200, j
        r = j["result"]
        assert r["intent"] in labels  # intents the model lacks are never predicted
        assert r["department"] == intents[r["intent"]]["dept"]
        assert r["category"] == intents[r["intent"]]["category"]
        assert r["category_name"] == categories[r["category"]]


def test_call_summary_names_the_category(dserver, taxonomy):
    intents, categories = taxonomy
    for text in ["我家停水了", "天河区荷光路南一巷12号", "对"]:
        status, j = dserver.http("/v1/converse", {"call_id": "cat-1", "text": text})
        assert status == 200, j
    status, s = dserver.http("/v1/calls/cat-1/end", {})
    assert status == 200, s
    assert s["intent"] == "water_outage", s
    assert s["category"] == intents["water_outage"]["category"] == "public_utilities"
    assert s["category_name"] == categories["public_utilities"] == "公用事业"
