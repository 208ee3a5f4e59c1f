"""What a refused command prints: one line on stderr naming what is wrong, never a traceback (shared by the
tests of bad inputs)."""


def one_error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines()
             if line.strip() and "%|" not in line and "Loading weights" not in line]
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    return lines[0]
