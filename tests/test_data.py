"""recipes.tools.data: the toy generator, the real-dataset mappers, the validator, ensure_data, the CLI,
and verl's own RLHFDataset reading what we write."""

import ast
import copy
import operator
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recipes.tools import data
from recipes.tools.data import DataError

REPO = Path(__file__).resolve().parents[1]


def _evaluate(expr: str) -> int:
    """Integer arithmetic with + - * and parentheses, evaluated from the syntax tree."""
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}

    def ev(node):
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        raise ValueError(f"unexpected syntax in {expr!r}: {ast.dump(node)}")

    return ev(ast.parse(expr, mode="eval").body)


# ----------------------------------------------------------------------------------------------
# toy_arithmetic


def test_toy_is_deterministic_byte_for_byte(tmp_path):
    a = data.write_toy_arithmetic(tmp_path / "a", n_train=300, n_test=50, seed=7)
    b = data.write_toy_arithmetic(tmp_path / "b", n_train=300, n_test=50, seed=7)
    c = data.write_toy_arithmetic(tmp_path / "c", n_train=300, n_test=50, seed=8)
    for pa_, pb, pc in zip(a, b, c, strict=True):
        assert pa_.read_bytes() == pb.read_bytes()
        assert pa_.read_bytes() != pc.read_bytes()
    # the test split depends only on (n_test, seed): a bigger train set keeps validation fixed
    _, test_small = data.toy_arithmetic_pairs(10, 50, seed=7)
    _, test_big = data.toy_arithmetic_pairs(1000, 50, seed=7)
    assert test_small == test_big


def test_toy_splits_are_disjoint_and_answers_correct(tmp_path):
    train_path, test_path = data.write_toy_arithmetic(tmp_path, n_train=1500, n_test=200, seed=3)
    train, test = pq.read_table(train_path).to_pylist(), pq.read_table(test_path).to_pylist()
    assert (len(train), len(test)) == (1500, 200)
    train_q, test_q = (
        [r["extra_info"]["question"] for r in train],
        [r["extra_info"]["question"] for r in test],
    )
    assert len(set(train_q)) == len(train_q) and len(set(test_q)) == len(test_q)
    assert not set(train_q) & set(test_q)
    two_step = 0
    for split, rows in (("train", train), ("test", test)):
        for i, row in enumerate(rows):
            q = row["extra_info"]["question"]
            assert q.startswith("What is ") and q.endswith("?"), q
            expr = q[len("What is ") : -1]
            value = _evaluate(expr)
            assert 0 <= value <= 200, q
            assert row["reward_model"]["ground_truth"] == str(value), q
            assert row["prompt"] == [{"role": "user", "content": q + data.INSTRUCTION}]
            assert row["extra_info"] == {"index": i, "split": split, "question": q}
            assert row["data_source"] == "toy_arithmetic"
            assert row["rephrasings"] == [
                f"Compute {expr}.",
                f"Calculate the value of {expr}.",
                f"{expr} equals what number?",
            ]
            two_step += expr.count(" ") > 2
    assert two_step > 100  # the 2-step questions are really there
    # the standard Qwen-math prompt, character for character
    assert data.INSTRUCTION == "\nPlease reason step by step, and put your final answer within \\boxed{}."


def test_toy_refuses_more_questions_than_exist():
    with pytest.raises(ValueError, match="at most 6000 distinct"):
        data.toy_arithmetic_pairs(6000, 1)
    train, test = data.toy_arithmetic_pairs(5999, 1)  # the limit itself is reachable
    assert len({q for q, _ in train + test}) == 6000


# ----------------------------------------------------------------------------------------------
# verl reads what we write


@pytest.fixture(scope="module")
def chat_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["What is 7 + 5?" + data.INSTRUCTION] * 10, trainer=trainer)
    template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", chat_template=template)


def test_verl_rlhf_dataset_loads_generated_file(tmp_path, chat_tokenizer, monkeypatch):
    import datasets
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")  # keep ~/.cache clean
    train_path, _ = data.write_toy_arithmetic(tmp_path, n_train=40, n_test=8, seed=1)
    config = OmegaConf.create(
        {
            "max_prompt_length": 256,
            "filter_overlong_prompts": True,  # tokenizes every prompt with the chat template
            "filter_overlong_prompts_workers": 1,
            "cache_dir": str(tmp_path / "verl"),
        }
    )
    ds = RLHFDataset(data_files=[str(train_path)], tokenizer=chat_tokenizer, config=config)
    assert len(ds) == 40  # a prompt that failed to tokenize would have been filtered out
    expected = pq.read_table(train_path).to_pylist()
    item = ds[5]
    assert item["raw_prompt"] == expected[5]["prompt"]
    assert item["reward_model"]["ground_truth"] == expected[5]["reward_model"]["ground_truth"]
    assert item["index"] == 5 and item["extra_info"]["question"] == expected[5]["extra_info"]["question"]
    assert list(item["rephrasings"]) == expected[5]["rephrasings"] and len(expected[5]["rephrasings"]) == 3
    batch = collate_fn([ds[i] for i in range(4)])
    assert [rm["ground_truth"] for rm in batch["reward_model"]] == [
        r["reward_model"]["ground_truth"] for r in expected[:4]
    ]
    rendered = chat_tokenizer.apply_chat_template(
        item["raw_prompt"], add_generation_prompt=True, tokenize=False
    )
    assert rendered.endswith("\\boxed{}.\n<|assistant|>")


# ----------------------------------------------------------------------------------------------
# Validator: every failure names file, row and column


def _good_rows(n=5):
    return data.make_rows(
        [(f"What is {i} + 1?", str(i + 1)) for i in range(n)], data_source="t", split="train"
    )


def _set(row, column, value):
    row[column] = value


def _set_nested(row, column, key, value):
    row[column] = {**row[column], key: value}


ROW_FAULTS = [
    # (name, row, column, message fragment, mutate the row)
    (
        "empty question",
        2,
        "extra_info",
        "question: is empty",
        lambda r: _set_nested(r, "extra_info", "question", "  "),
    ),
    (
        "null answer",
        1,
        "reward_model",
        "ground_truth: expected a string, got null",
        lambda r: _set_nested(r, "reward_model", "ground_truth", None),
    ),
    (
        "empty ground truth",
        3,
        "reward_model",
        "ground_truth: is empty",
        lambda r: _set_nested(r, "reward_model", "ground_truth", ""),
    ),
    (
        "bad role",
        4,
        "prompt",
        "role 'bot'",
        lambda r: r["prompt"].__setitem__(0, {"role": "bot", "content": "x"}),
    ),
    (
        "empty content",
        0,
        "prompt",
        "content",
        lambda r: r["prompt"].__setitem__(0, {"role": "user", "content": ""}),
    ),
    ("no messages", 2, "prompt", "non-empty list", lambda r: _set(r, "prompt", [])),
    (
        "last not user",
        1,
        "prompt",
        "last message",
        lambda r: r["prompt"].append({"role": "assistant", "content": "a"}),
    ),
    ("bad split", 3, "extra_info", "split 'val'", lambda r: _set_nested(r, "extra_info", "split", "val")),
    ("repeated index", 4, "extra_info", "repeats row 0", lambda r: _set_nested(r, "extra_info", "index", 0)),
    ("empty rephrasing", 1, "rephrasings", "is empty", lambda r: _set(r, "rephrasings", [""])),
    ("empty data_source", 0, "data_source", "is empty", lambda r: _set(r, "data_source", "")),
]


@pytest.mark.parametrize("fault", ROW_FAULTS, ids=[f[0] for f in ROW_FAULTS])
def test_validator_names_file_row_and_column(tmp_path, fault):
    _, row, column, fragment, mutate = fault
    rows = _good_rows()
    mutate(rows[row])
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=data.ROW_SCHEMA), path)
    with pytest.raises(DataError) as err:
        data.validate_parquet(path)
    assert (err.value.source, err.value.row, err.value.column) == (str(path), row, column)
    assert fragment in str(err.value)
    assert str(err.value).startswith(f"{path}, row {row}, column {column!r}: ")


def test_validator_wrong_column_types_and_missing_columns(tmp_path):
    """Files written by hand (pandas-style inferred types): the whole column has the wrong type."""
    cases = {
        "ability": (
            [{**r, "ability": i} for i, r in enumerate(_good_rows())],
            0,
            "expected a string, got int",
        ),
        "prompt": ([{**r, "prompt": "What?"} for r in _good_rows()], 0, "chat messages, got str"),
        "extra_info": (
            [{**r, "extra_info": {"split": "train", "question": "q"}} for r in _good_rows()],
            0,
            "index: expected an int, got null",
        ),
        "rephrasings": ([{**r, "rephrasings": "x"} for r in _good_rows()], 0, "list of strings, got str"),
        "reward_model": (
            [{k: v for k, v in r.items() if k != "reward_model"} for r in _good_rows()],
            None,
            "missing",
        ),
    }
    for column, (rows, row, fragment) in cases.items():
        path = tmp_path / f"{column}.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
        with pytest.raises(DataError, match=fragment) as err:
            data.validate_parquet(path)
        assert (err.value.source, err.value.row, err.value.column) == (str(path), row, column), column
        assert str(path) in str(err.value)
    err = DataError("f.parquet", 3, "answer", "is empty")
    assert (
        pickle.loads(pickle.dumps(err)).args == err.args == ("f.parquet, row 3, column 'answer': is empty",)
    )
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_text("hello")
    with pytest.raises(DataError, match="cannot read as parquet"):
        data.validate_parquet(not_parquet)


def _write_invalid_utf8(path: Path, rows: list[dict], marker: str = "ZQX") -> None:
    """Write `rows`, then turn the first byte of every `marker` in the file into 0xff: text that
    parquet stores and Python cannot decode (uncompressed, no dictionary, no page checksums)."""
    pq.write_table(
        pa.Table.from_pylist(rows, schema=data.ROW_SCHEMA), path, compression="none", use_dictionary=False
    )
    raw = path.read_bytes()
    assert marker.encode() in raw
    path.write_bytes(raw.replace(marker.encode(), b"\xff" + marker[1:].encode()))


@pytest.mark.parametrize("column", ["extra_info", "prompt"])
def test_invalid_utf8_names_file_row_and_column_in_every_reader(tmp_path, column):
    rows = _good_rows(6)
    if column == "extra_info":
        rows[4]["extra_info"]["question"] += "ZQX"
    else:
        rows[4]["prompt"][-1]["content"] += "ZQX"
    bad = tmp_path / "bad.parquet"
    _write_invalid_utf8(bad, rows)
    expected = f"{bad}, row 4, column {column!r}: text is not valid UTF-8"
    with pytest.raises(DataError) as err:
        data.validate_parquet(bad)
    assert str(err.value).startswith(expected), err.value

    fail = _cli("validate", str(bad))  # `recipes.train` checks its files with the same function
    assert fail.returncode == 2 and expected in fail.stderr and "Traceback" not in fail.stderr
    rephrase = subprocess.run(
        [
            sys.executable,
            "-m",
            "recipes.tools.rephrase",
            "--input",
            str(bad),
            "--output",
            str(tmp_path / "o.parquet"),
        ]
        + ["--rephrasings", "1", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rephrase.returncode == 2 and expected in rephrase.stderr and "Traceback" not in rephrase.stderr


def test_validator_accepts_extra_columns_and_keys_and_a_system_message(tmp_path):
    rows = _good_rows()
    rows[0] = data.make_row(
        "Q?", "1", data_source="t", split="test", index=0, system="Be brief.", rephrasings=["Q2?"]
    )
    for r in rows:
        r["extra_info"] = {**r["extra_info"], "template": "t1"}
        r["level"] = 3
    path = tmp_path / "extra.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert data.validate_parquet(path) == 5
    assert data.validate_rows(rows) == 5


def test_write_is_atomic_and_validates_first(tmp_path):
    path = tmp_path / "train.parquet"
    data.write_rows(_good_rows(), path)
    before = path.read_bytes()
    bad = _good_rows()
    bad[2]["reward_model"]["ground_truth"] = ""
    with pytest.raises(DataError, match="row 2, column 'reward_model'"):
        data.write_rows(bad, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.parquet"]  # no temporary file left


# ----------------------------------------------------------------------------------------------
# Real-dataset mappers, on rows shaped like each dataset's (no download)

ZOO_PROMPT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nFind $x$ if $2x=6$."
    "\nPlease reason step by step, and put your final answer within \\boxed{{}}.<|im_end|>\n<|im_start|>assistant\n"
)


def test_map_simplerl_zoo():
    row = {
        "data_source": "simplelr_qwen",
        "prompt": [{"role": "user", "content": ZOO_PROMPT}],
        "ability": "math",
        "reward_model": {"ground_truth": "3", "style": "rule"},
        "extra_info": {
            "answer": "3",
            "index": 0,
            "level": 3,
            "question": "Find $x$ if $2x=6$.",
            "split": "train",
        },
    }
    assert data.map_simplerl_zoo(row) == ("Find $x$ if $2x=6$.", "3")
    flat = {"question": "What is $1+1$?", "gt_answer": "2", "level": 3}
    assert data.map_simplerl_zoo(flat) == ("What is $1+1$?", "2")
    baked = {
        "question": "Q?\nPlease reason step by step, and put your final answer within \\boxed{}.",
        "answer": "1",
    }
    assert data.map_simplerl_zoo(baked) == ("Q?", "1")
    no_answer = copy.deepcopy(row)
    no_answer["extra_info"]["answer"] = ""
    no_answer["reward_model"]["ground_truth"] = ""
    assert data.map_simplerl_zoo(no_answer) is None


def test_map_hendrycks_math():
    row = {
        "problem": "Compute $\\sin 60^\\circ$.",
        "level": "Level 2",
        "type": "Precalculus",
        "solution": "First $\\boxed{1}$ is wrong. So $\\sin 60^\\circ = \\boxed{\\frac{\\sqrt{3}}{2}}$.",
    }
    assert data.map_hendrycks_math(row) == ("Compute $\\sin 60^\\circ$.", "\\frac{\\sqrt{3}}{2}")
    assert data.map_hendrycks_math({**row, "solution": "The answer is 5."}) is None


def test_map_problem_answer_for_open_rs_deepscaler_math500():
    open_rs = {"problem": " Find $n$. ", "solution": "...", "answer": "12", "level": "Hard"}
    deepscaler = {"problem": "How many?", "answer": 40.0, "solution": "..."}
    math500 = {"problem": "P", "solution": "S", "answer": "\\frac{1}{2}", "subject": "Algebra", "level": 1}
    assert data.map_problem_answer(open_rs) == ("Find $n$.", "12")
    assert data.map_problem_answer(deepscaler) == ("How many?", "40")
    assert data.map_problem_answer(math500) == ("P", "\\frac{1}{2}")
    assert data.map_problem_answer({"problem": "P", "answer": None}) is None
    assert data.map_problem_answer({"problem": "", "answer": "1"}) is None


def test_build_prepared_drops_unusable_and_test_questions(tmp_path):
    train_raw = [
        {"problem": "What is 1+1?", "answer": "2", "solution": "", "level": "Easy"},
        {"problem": "  what IS   2+2? ", "answer": "4", "solution": "", "level": "Easy"},  # a test question
        {"problem": "No answer", "answer": "", "solution": "", "level": "Hard"},
        {"problem": "Big", "answer": 7, "solution": "", "level": "Hard"},
    ]
    test_raw = [
        {
            "problem": "What is 2+2?",
            "answer": "4",
            "solution": "",
            "subject": "A",
            "level": 1,
            "unique_id": "x",
        }
    ]
    train, test, counts = data.build_prepared("open_rs", train_raw, test_raw)
    pairs = [(r["extra_info"]["question"], r["reward_model"]["ground_truth"]) for r in train]
    assert pairs == [("What is 1+1?", "2"), ("Big", "7")]
    assert counts == {
        "train_source": 4,
        "train_unusable": 1,
        "test_source": 1,
        "test_unusable": 0,
        "train_in_test": 1,
        "train": 2,
        "test": 1,
    }
    assert {r["data_source"] for r in train} == {"open_rs"} and test[0]["data_source"] == "math500"
    assert [r["extra_info"]["index"] for r in train] == [0, 1]
    assert data.validate_rows(train) == 2 and data.validate_rows(test) == 1
    with pytest.raises(ValueError, match="unknown dataset"):
        data.prepare("gsm8k", tmp_path)


def test_dataset_registry():
    assert set(data.DATASETS) == {"math_l3to5", "math", "open_rs", "deepscaler"}
    train, test = data.DATASETS["math_l3to5"]
    assert train.hf_id == test.hf_id == "hkust-nlp/SimpleRL-Zoo-Data"
    assert train.data_files == "simplelr_qwen_level3to5/train.parquet"
    assert data.DATASETS["math"][0].configs == data.MATH_SUBJECTS and len(data.MATH_SUBJECTS) == 7
    for name in ("math", "open_rs", "deepscaler"):
        assert data.DATASETS[name][1] is data.MATH500


# ----------------------------------------------------------------------------------------------
# ensure_data


def test_ensure_data_generates_toy_once_and_regenerates_on_new_settings(tmp_path):
    out = tmp_path / "toy"
    train, test = data.ensure_data("toy_arithmetic", out, n_train=100, n_test=20, seed=5)
    assert (train, test) == (out / "train.parquet", out / "test.parquet")
    stamp = train.stat().st_mtime_ns, test.stat().st_mtime_ns
    data.ensure_data("toy_arithmetic", out, n_train=100, n_test=20, seed=5)
    assert (train.stat().st_mtime_ns, test.stat().st_mtime_ns) == stamp  # present and current: untouched
    before = train.read_bytes()
    data.ensure_data("toy_arithmetic", out, n_train=100, n_test=20, seed=6)
    assert train.read_bytes() != before and pq.read_metadata(train).num_rows == 100
    assert data.read_meta(train)["params"]["seed"] == 6


def test_ensure_data_downloaded_dataset_missing_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPES_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match=r"python -m recipes\.tools\.data prepare math_l3to5$"):
        data.ensure_data("math_l3to5")
    out = tmp_path / "somewhere"
    with pytest.raises(FileNotFoundError, match=rf"prepare deepscaler --out {out}$"):
        data.ensure_data("deepscaler", out)
    with pytest.raises(ValueError, match="unknown dataset"):
        data.ensure_data("gsm8k")
    # prepared files are found and validated
    train, test, _ = data.build_prepared(
        "open_rs", [{"problem": "Q", "answer": "1"}], [{"problem": "T", "answer": "2"}]
    )
    data.write_rows(test, data.default_out_dir("open_rs") / "test.parquet")
    data.write_rows(train, data.default_out_dir("open_rs") / "train.parquet")
    assert data.ensure_data("open_rs") == (
        tmp_path / "cache/data/open_rs/train.parquet",
        tmp_path / "cache/data/open_rs/test.parquet",
    )


# ----------------------------------------------------------------------------------------------
# CLI


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "recipes.tools.data", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_cli_toy_validate_and_errors(tmp_path):
    out = _cli(
        "toy_arithmetic",
        "--n-train",
        "60",
        "--n-test",
        "12",
        "--seed",
        "2",
        env={"RECIPES_CACHE": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    train, test = (
        tmp_path / "data/toy_arithmetic/train.parquet",
        tmp_path / "data/toy_arithmetic/test.parquet",
    )
    assert f"wrote {train} (60 rows)" in out.stdout and f"wrote {test} (12 rows)" in out.stdout
    assert train.read_bytes() == data.write_toy_arithmetic(tmp_path / "py", 60, 12, 2)[0].read_bytes()

    ok = _cli("validate", str(train), str(test))
    assert ok.returncode == 0, ok.stderr
    assert f"{test}: ok, 12 rows" in ok.stdout

    rows = pq.read_table(train).to_pylist()
    rows[7]["extra_info"]["question"] = ""
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=data.ROW_SCHEMA), bad)
    fail = _cli("validate", str(train), str(bad))
    assert fail.returncode == 2  # bad input
    assert f"{bad}, row 7, column 'extra_info': question: is empty" in fail.stderr
    assert "Traceback" not in fail.stderr

    assert _cli("prepare", "nope").returncode == 2  # argparse: not a known dataset
    own_out = _cli("toy_arithmetic", "--out", str(tmp_path / "mine"), "--n-train", "5", "--n-test", "5")
    assert own_out.returncode == 0 and (tmp_path / "mine/test.parquet").exists()


def test_a_cell_past_the_size_limit_is_refused_naming_its_row_and_column(tmp_path):
    """One text over 1 MiB, at the top level or inside the prompt's messages: refused before it
    becomes a Python string (a 1 GiB cell passed and took 4.4 GB); at the limit it passes."""
    rows = data.make_rows(
        [(f"What is {i} + 1?", str(i + 1)) for i in range(4)], data_source="d", split="train"
    )
    path = tmp_path / "ok.parquet"
    at_limit = copy.deepcopy(rows)
    at_limit[1]["extra_info"]["question"] = "x" * data.MAX_CELL_BYTES
    pq.write_table(pa.Table.from_pylist(at_limit), path)
    assert data.validate_parquet(path) == 4
    for row, column in ((2, "extra_info"), (3, "prompt"), (1, "rephrasings")):
        big = copy.deepcopy(rows)
        text = "é" * (data.MAX_CELL_BYTES // 2) + "x"  # 2 bytes a character: over by one byte
        if column == "extra_info":
            big[row]["extra_info"]["question"] = text
        elif column == "prompt":
            big[row]["prompt"] = [{"role": "user", "content": "hi"}, {"role": "user", "content": text}]
        else:
            big[row]["rephrasings"] = ["fine", text]
        path = tmp_path / f"{column}.parquet"
        pq.write_table(pa.Table.from_pylist(big), path)
        with pytest.raises(DataError, match="longer than 1,048,576 bytes") as err:
            data.validate_parquet(path)
        assert (err.value.row, err.value.column) == (row, column)


def test_a_folder_a_dead_link_and_a_missing_file_each_say_what_they_are(tmp_path):
    folder = tmp_path / "x.parquet"
    folder.mkdir()  # pyarrow reads it as an empty dataset: it used to say "missing column"
    loop = tmp_path / "loop.parquet"
    loop.symlink_to(loop)
    cases = {
        folder: "a folder, not a parquet file",
        loop: "a symbolic link that leads nowhere",
        tmp_path / "nope.parquet": "no such file",
    }
    for path, said in cases.items():
        with pytest.raises(DataError, match=said) as err:
            data.validate_parquet(path)
        assert err.value.source == str(path) and err.value.row is None
