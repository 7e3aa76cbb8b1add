"""bench/gateway_overhead.py starts our web process as deployed (uvicorn with the
Procfile's options, the same command line as tests/stack.py's), or daphne on request."""

from pathlib import Path

import pytest

from bench.overhead_levels import ours_argv, overhead_parser
from tests.stack import WEB_OPTIONS, web_argv

ROOT = Path(__file__).resolve().parents[2]


def test_ours_is_the_deployed_uvicorn_by_default():
    args = overhead_parser().parse_args([])
    argv = ours_argv(args.server, 8123)
    assert Path(argv[0]).name == "uvicorn"
    assert argv == web_argv(8123)
    # the options the Procfile's web line gives, in full
    procfile = (ROOT / "Procfile").read_text()
    assert " ".join(WEB_OPTIONS) in procfile
    assert " ".join(WEB_OPTIONS) in " ".join(argv)
    assert argv[-1] == "chatsite.asgi:application"


def test_ours_can_be_daphne_for_a_comparison():
    args = overhead_parser().parse_args(["--server", "daphne"])
    argv = ours_argv(args.server, 8123)
    assert Path(argv[0]).name == "daphne"
    assert "port=8123" in " ".join(argv)


def test_an_unknown_server_is_refused():
    with pytest.raises(ValueError, match="uvicorn or daphne"):
        ours_argv("gunicorn", 8123)
    with pytest.raises(SystemExit):
        overhead_parser().parse_args(["--server", "gunicorn"])
