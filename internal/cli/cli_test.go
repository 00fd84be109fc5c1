package cli_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"testing"

	"github.com/ratekit/ratekit/internal/cli"
)

func TestExitCode(t *testing.T) {
	base := errors.New("base")
	for _, tc := range []struct {
		err    error
		code   int
		stderr string
	}{
		{nil, 0, ""},
		{flag.ErrHelp, 0, ""},
		{cli.Usagef("-limit %d: bad", -1), 2, "cmd: -limit -1: bad\n"},
		{fmt.Errorf("parsing: %w", cli.Usagef("-x")), 2, "cmd: parsing: -x\n"},
		{cli.Reported(errors.New("printed by flag")), 2, ""},
		{base, 1, "cmd: base\n"},
	} {
		var stderr bytes.Buffer
		if code := cli.ExitCode("cmd", tc.err, &stderr); code != tc.code || stderr.String() != tc.stderr {
			t.Errorf("%v: exit %d, printed %q; want %d, %q", tc.err, code, stderr.String(), tc.code, tc.stderr)
		}
	}
	if err := cli.Usagef("wraps %w", base); !errors.Is(err, base) {
		t.Errorf("Usagef does not wrap: %v", err)
	}
}
