"""Service units: rendered units verified by systemd itself, plists parsed, install/uninstall plans run."""

from __future__ import annotations

import os
import plistlib
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from memd.daemon import service, units
from memd.daemon.service import install, uninstall, unit_path
from memd.daemon.units import ServiceError, render_launchd, render_systemd
from memd.tree import Home

REPO = Path(service.__file__).resolve().parents[2]
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


@pytest.fixture
def fake_memd(tmp_path: Path) -> Path:
    """A real executable (systemd-analyze verify checks ExecStart exists), in a path that needs quoting."""
    d = tmp_path / "bin dir"
    d.mkdir()
    exe = d / "memd"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return exe


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "deep code 100%")


@pytest.fixture
def unit_dirs(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    sd, la = tmp_path / "systemd-user", tmp_path / "LaunchAgents"
    monkeypatch.setenv(service.SYSTEMD_DIR_ENV, str(sd))
    monkeypatch.setenv(service.LAUNCHD_DIR_ENV, str(la))
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus")  # systemctl itself is faked
    return sd, la


def _directives(unit: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in unit.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            k, v = line.split("=", 1)
            out.setdefault(k.strip(), []).append(v.strip())
    return out


# --- systemd --------------------------------------------------------------------------------


def test_systemd_unit_has_the_required_directives(fake_memd: Path, home: Home) -> None:
    d = _directives(render_systemd(fake_memd, home))
    argv = shlex.split(d["ExecStart"][0].replace("%%", "%").replace("$$", "$"))
    assert argv == [str(fake_memd), "--home", str(home.root), "run"]
    assert d["Restart"] == ["on-failure"]
    assert {"3", "5"} <= set(d["RestartPreventExitStatus"][0].split())
    assert int(d["TimeoutStopSec"][0]) >= 300
    assert d["KillSignal"] == ["SIGTERM"]
    assert d["Nice"] == ["10"]
    assert d["IOSchedulingClass"] == ["idle"]
    assert d["CPUSchedulingPolicy"] == ["batch"]
    assert d["WantedBy"] == ["default.target"]
    assert "{{" not in render_systemd(fake_memd, home)


def _verify(unit_text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    d = tmp_path / "verify"
    d.mkdir(exist_ok=True)
    path = d / "memd.service"
    path.write_text(unit_text)
    # System-manager mode: `--user` needs a running user manager ($XDG_RUNTIME_DIR),
    # which CI and containers lack. The directives checked are the same.
    return subprocess.run([SYSTEMD_ANALYZE, "verify", str(path)], capture_output=True, text=True, timeout=120)


def _complaints(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (proc.stdout + proc.stderr).splitlines() if "memd.service" in line]


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed (no systemd on this machine)")
def test_systemd_analyze_verify_accepts_the_unit(fake_memd: Path, home: Home, tmp_path: Path) -> None:
    proc = _verify(render_systemd(fake_memd, home), tmp_path)
    assert proc.returncode == 0, proc.stderr
    # Unknown keys and bad values are only warnings: any line about our unit is a failure.
    assert _complaints(proc) == []


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed (no systemd on this machine)")
def test_systemd_analyze_verify_would_catch_a_broken_unit(fake_memd: Path, home: Home, tmp_path: Path) -> None:
    """The check above can fail: a missing executable and a misspelt key are both reported."""
    missing = render_systemd(tmp_path / "nowhere" / "memd", home)
    assert _verify(missing, tmp_path).returncode != 0
    misspelt = render_systemd(fake_memd, home).replace("Nice=10", "Nicety=10")
    assert _complaints(_verify(misspelt, tmp_path))


def test_systemd_quoting_survives_odd_paths() -> None:
    assert units.systemd_quote("/usr/bin/memd") == "/usr/bin/memd"
    assert units.systemd_quote("/a b/100%$x\"q\\") == '"/a b/100%%$$x\\"q\\\\"'
    with pytest.raises(ServiceError):
        render_systemd("/usr/bin/memd", "/home/x\nExecStartPre=/bin/evil")
    with pytest.raises(ServiceError):
        render_systemd("memd", "/home/x")  # relative: the service manager has no PATH of ours


def test_python_dash_m_fallback_renders_as_separate_words(home: Home) -> None:
    argv = ["/usr/bin/python3", "-m", "memd"]
    d = _directives(render_systemd(argv, home))
    assert shlex.split(d["ExecStart"][0].replace("%%", "%"))[:4] == [*argv, "--home"]
    plist = plistlib.loads(render_launchd(argv, home).encode())
    assert plist["ProgramArguments"] == [*argv, "--home", str(home.root), "run"]


# --- launchd --------------------------------------------------------------------------------


def test_launchd_plist_parses_with_the_required_keys(fake_memd: Path, tmp_path: Path) -> None:
    home = Home(tmp_path / "a <weird> & home")
    plist = plistlib.loads(render_launchd(fake_memd, home).encode())
    assert plist["Label"] == "com.memd.agent"
    assert plist["ProgramArguments"] == [str(fake_memd), "--home", str(home.root), "run"]
    assert plist["RunAtLoad"] is True
    assert plist["KeepAlive"] == {"SuccessfulExit": False}
    assert plist["ProcessType"] == "Background"
    assert plist["LowPriorityIO"] is True
    assert plist["Nice"] == 10
    assert plist["ExitTimeOut"] >= 300
    for key in ("StandardOutPath", "StandardErrorPath"):
        assert Path(plist[key]).parent == home.logs_dir
    assert plist["EnvironmentVariables"]["MEMD_STDERR_LEVEL"] == "warning"


def test_fallback_templates_match_the_repository_files() -> None:
    """A wheel lacks systemd/ and launchd/; the embedded copies must not drift from them."""
    assert (REPO / "systemd" / "memd.service").read_text() == units.SYSTEMD_TEMPLATE
    assert (REPO / "launchd" / "com.memd.agent.plist").read_text() == units.LAUNCHD_TEMPLATE


# --- where and which ---------------------------------------------------------------------


def test_unit_paths(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv(service.SYSTEMD_DIR_ENV, raising=False)
    monkeypatch.delenv(service.LAUNCHD_DIR_ENV, raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert unit_path("linux") == tmp_path / ".config/systemd/user/memd.service"
    assert unit_path("darwin") == tmp_path / "Library/LaunchAgents/com.memd.agent.plist"
    monkeypatch.setenv(service.SYSTEMD_DIR_ENV, str(tmp_path / "u"))
    assert unit_path("linux") == tmp_path / "u" / "memd.service"
    with pytest.raises(service.UnsupportedPlatform):
        unit_path("win32")


def test_memd_executable_is_absolute_and_runnable() -> None:
    argv = service.memd_executable()
    assert os.path.isabs(argv[0]) and os.access(argv[0], os.X_OK)
    assert argv[1:] in ([], ["-m", "memd"])


# --- install / uninstall -------------------------------------------------------------------


class Recorder:
    """The `run` and `echo` callables: records, in one timeline, what was said and what was run."""

    def __init__(self, fail: dict[str, int] | None = None) -> None:
        self.timeline: list[tuple[str, object]] = []
        self.fail = fail or {}

    def echo(self, text: str) -> None:
        self.timeline.append(("echo", text))

    def run(self, argv: list[str]) -> int:
        self.timeline.append(("run", argv))
        return next((rc for word, rc in self.fail.items() if word in argv), 0)

    @property
    def commands(self) -> list[list[str]]:
        return [a for kind, a in self.timeline if kind == "run"]  # type: ignore[misc]

    def assert_each_command_echoed_first(self) -> None:
        for i, (kind, argv) in enumerate(self.timeline):
            if kind == "run":
                assert self.timeline[i - 1] == ("echo", f"$ {shlex.join(argv)}")  # type: ignore[arg-type]


def test_dry_run_changes_nothing(fake_memd: Path, home: Home, unit_dirs, tmp_path: Path) -> None:
    before = sorted(p for p in tmp_path.rglob("*"))
    rec = Recorder()
    assert install(home, dry_run=True, echo=rec.echo, run=rec.run, platform="linux", memd_path=fake_memd) == 0
    assert rec.commands == []
    assert sorted(p for p in tmp_path.rglob("*")) == before
    said = "\n".join(str(t) for _, t in rec.timeline)
    assert str(unit_path("linux")) in said and "ExecStart=" in said
    assert "systemctl --user enable --now memd.service" in said


def test_install_writes_the_unit_then_runs_systemctl_in_order(fake_memd: Path, home: Home, unit_dirs) -> None:
    rec = Recorder()
    assert install(home, dry_run=False, echo=rec.echo, run=rec.run, platform="linux", memd_path=fake_memd) == 0
    target = unit_path("linux")
    assert target.read_text() == render_systemd(fake_memd, home)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert rec.commands == [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "try-restart", "memd.service"],
        ["systemctl", "--user", "enable", "--now", "memd.service"],
    ]
    rec.assert_each_command_echoed_first()
    assert home.logs_dir.is_dir()


def test_install_stops_at_the_first_failing_command(fake_memd: Path, home: Home, unit_dirs) -> None:
    rec = Recorder(fail={"daemon-reload": 1})
    assert install(home, dry_run=False, echo=rec.echo, run=rec.run, platform="linux", memd_path=fake_memd) == 1
    assert rec.commands == [["systemctl", "--user", "daemon-reload"]]
    assert any("failed (exit 1)" in str(t) for _, t in rec.timeline)


def test_uninstall_reverses_install(fake_memd: Path, home: Home, unit_dirs) -> None:
    install(home, dry_run=False, echo=Recorder().echo, run=Recorder().run, platform="linux", memd_path=fake_memd)
    target = unit_path("linux")
    dry = Recorder()
    assert uninstall(home, dry_run=True, echo=dry.echo, run=dry.run, platform="linux") == 0
    assert target.exists() and dry.commands == []
    rec = Recorder()
    assert uninstall(home, dry_run=False, echo=rec.echo, run=rec.run, platform="linux") == 0
    assert not target.exists()
    assert rec.commands == [
        ["systemctl", "--user", "disable", "--now", "memd.service"],
        ["systemctl", "--user", "daemon-reload"],
    ]
    rec.assert_each_command_echoed_first()
    assert home.root.exists()  # memd's data is never touched
    again = Recorder()
    assert uninstall(home, dry_run=False, echo=again.echo, run=again.run, platform="linux") == 0
    assert again.commands == [] and "not installed" in str(again.timeline)


def test_launchd_install_and_uninstall(fake_memd: Path, home: Home, unit_dirs) -> None:
    uid = os.getuid()
    # bootout fails when the agent is not loaded yet: expected, install carries on.
    rec = Recorder(fail={"bootout": 36})
    assert install(home, dry_run=False, echo=rec.echo, run=rec.run, platform="darwin", memd_path=fake_memd) == 0
    target = unit_path("darwin")
    assert plistlib.loads(target.read_bytes())["ProgramArguments"][0] == str(fake_memd)
    assert rec.commands == [
        ["launchctl", "bootout", f"gui/{uid}/com.memd.agent"],
        ["launchctl", "enable", f"gui/{uid}/com.memd.agent"],
        ["launchctl", "bootstrap", f"gui/{uid}", str(target)],
    ]
    rec.assert_each_command_echoed_first()
    rec = Recorder()
    assert uninstall(home, dry_run=False, echo=rec.echo, run=rec.run, platform="darwin") == 0
    assert rec.commands == [["launchctl", "bootout", f"gui/{uid}/com.memd.agent"]]
    assert not target.exists()


def test_install_without_a_user_bus_says_what_to_do(fake_memd: Path, home: Home, unit_dirs, monkeypatch) -> None:
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home.root / "no-runtime"))
    rec = Recorder()
    with pytest.raises(service.ServiceError, match="enable-linger") as exc:
        install(home, dry_run=False, echo=rec.echo, run=rec.run, platform="linux", memd_path=fake_memd)
    assert "memd run" in str(exc.value) and rec.commands == []
    assert service.user_bus_problem({"XDG_RUNTIME_DIR": str(home.root)}) is not None
    (home.root / "bus").parent.mkdir(parents=True, exist_ok=True)
    (home.root / "bus").write_text("")
    assert service.user_bus_problem({"XDG_RUNTIME_DIR": str(home.root)}) is None


def test_uninstall_removes_the_unit_even_when_systemctl_fails(fake_memd: Path, home: Home, unit_dirs) -> None:
    install(home, dry_run=False, echo=Recorder().echo, run=Recorder().run, platform="linux", memd_path=fake_memd)
    rec = Recorder(fail={"disable": 1, "daemon-reload": 1})
    assert uninstall(home, dry_run=False, echo=rec.echo, run=rec.run, platform="linux") == 0
    assert not unit_path("linux").exists()
