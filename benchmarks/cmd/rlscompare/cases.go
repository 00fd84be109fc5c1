package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ratekit/ratekit/benchmarks/rlscases"
)

// reloadTimeout bounds the wait for a service to pick up a change of its
// configuration directory.
const reloadTimeout = 15 * time.Second

// cases plays the cases and the reload check on every kind's main
// instance and prints the table of cases by service.
func (h *harness) cases(ctx context.Context, w io.Writer) error {
	cases := rlscases.Cases()
	names := make([]string, 0, len(cases)+1)
	from := map[string]string{}
	reasons := map[string]string{}
	for _, c := range cases {
		names = append(names, c.Name)
		from[c.Name] = c.From
		if c.Listed() {
			reasons[c.Name] = c.Reason
		}
	}
	names = append(names, "reload")
	from["reload"] = "reference test/integration testConfigReload"

	diffs := map[string]map[string][]rlscases.Diff{} // kind, case
	took := map[string]time.Duration{}
	for _, k := range h.kinds {
		start := time.Now()
		byCase := map[string][]rlscases.Diff{}
		for _, d := range rlscases.Run(ctx, k.conn, cases) {
			byCase[d.Case] = append(byCase[d.Case], d)
		}
		for _, d := range rlscases.RunReload(ctx, k.conn, k.configDir, reloadTimeout) {
			byCase[d.Case] = append(byCase[d.Case], d)
		}
		diffs[k.name] = byCase
		took[k.name] = time.Since(start)
		if err := ctx.Err(); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "## Cases")
	fmt.Fprintln(w)
	fmt.Fprint(w, "Expected answers are the reference's; a listed difference is ratekit's documented semantics (reason below). ")
	fmt.Fprintln(w, "duration_until_reset is checked as 0 < d <= unit.")
	fmt.Fprintln(w)
	fmt.Fprint(w, "| case | from |")
	for _, k := range h.kinds {
		fmt.Fprintf(w, " %s |", k.label)
	}
	fmt.Fprint(w, "\n|---|---|")
	for range h.kinds {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	failed := 0
	for _, name := range names {
		fmt.Fprintf(w, "| %s | %s |", name, from[name])
		for _, k := range h.kinds {
			ds := diffs[k.name][name]
			switch {
			case len(ds) == 0:
				fmt.Fprint(w, " pass |")
			case ds[0].Listed:
				fmt.Fprint(w, " listed difference |")
			default:
				failed++
				fmt.Fprintf(w, " **differs** (%d) |", len(ds))
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	for _, k := range h.kinds {
		pass, listed, differ := 0, 0, 0
		for _, name := range names {
			switch ds := diffs[k.name][name]; {
			case len(ds) == 0:
				pass++
			case ds[0].Listed:
				listed++
			default:
				differ++
			}
		}
		fmt.Fprintf(w, "%s: %d cases in %s: %d pass, %d listed differences, %d differ.\n",
			k.label, len(names), took[k.name].Round(time.Millisecond), pass, listed, differ)
	}
	fmt.Fprintln(w)

	if len(reasons) > 0 {
		fmt.Fprintln(w, "Listed differences (ratekit's expected answers differ from the reference's):")
		fmt.Fprintln(w)
		for _, name := range names {
			if r, ok := reasons[name]; ok {
				fmt.Fprintf(w, "- %s: %s\n", name, r)
			}
		}
		fmt.Fprintln(w)
	}
	if failed > 0 {
		fmt.Fprintln(w, "Differences:")
		fmt.Fprintln(w)
		for _, k := range h.kinds {
			for _, name := range names {
				ds := diffs[k.name][name]
				if len(ds) == 0 || ds[0].Listed {
					continue
				}
				for _, d := range ds {
					fmt.Fprintf(w, "- %s: %s step %d rep %d: %s", k.label, d.Case, d.Step, d.Rep, markdownSafe(d.Detail))
					if d.Got != "" || d.Want != "" {
						fmt.Fprintf(w, " (got `%s`, want `%s`)", d.Got, d.Want)
					}
					fmt.Fprintln(w)
				}
			}
		}
		fmt.Fprintln(w)
	}
	return nil
}

// markdownSafe keeps a text from breaking a Markdown list item or table.
func markdownSafe(s string) string {
	return strings.NewReplacer("|", "/", "\n", " ").Replace(s)
}
