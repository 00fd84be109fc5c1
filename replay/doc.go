// Package replay replays access logs through ratekit's limits, to choose
// limits from real traffic before enforcing them.
//
// A replay reads log lines (nginx/Apache common and combined format, or
// JSON lines with configurable members: Options.Format, Fields) and
// decides each request, at the time the line gives, with the real
// core.Limiter and core.MemoryStore, whose clock is the log's. It replays
// either flag-built limits (Options.Limits, keyed by Options.Key: the
// client IP, a header or the user; several algorithms side by side), or
// a rules file's config (Options.Rules), decided as the rules middleware
// decides: rules.Engine's Checks and core.TakeAll. As TakeAll stops at
// the first rule that rejects a request, a rule that another rejected is
// counted as not deciding it (LimitReport.NotDecided), neither admitted
// nor rejected.
//
//	rep, err := replay.Run(ctx, replay.Options{
//		Limits: []core.Limit{{Algorithm: core.FixedWindow, Rate: core.PerMinute(100)}},
//	}, replay.Input{Name: "access.log", Open: func() (io.ReadCloser, error) { return os.Open("access.log") }})
//	rep.WriteText(os.Stdout) // or encoding/json, or rep.WriteHTML
//
// The model:
//
//   - Time is the log's, from the years 1970 to 2200 (a time outside
//     them, a date such as 31 February, or a zone offset beyond 14 hours
//     makes a bad line). Lines are replayed in file order; a line earlier
//     than the latest time seen is replayed at that latest time, and
//     counted in Report.OutOfOrder (the text report warns beyond 1%:
//     files given in the wrong order). A line more than Options.MaxJump
//     (default: the longest period, at least an hour) ahead of the latest
//     time seen is replayed only when Options.JumpLines lines in a row
//     (default 5) confirm the jump (a gap in the traffic); otherwise it
//     is an outlier, counted as a bad line, "time jump". Each limit is
//     replayed with its own counters, from the time of the first line
//     kept.
//   - Lines that do not parse (or longer than Options.MaxLineBytes, at
//     most 1 MiB) are counted and skipped; the first few are quoted with
//     their line numbers. Lines without a key (no such header, no user)
//     are counted in Report.Unkeyed and not replayed, as middleware would
//     not limit them.
//   - Memory does not grow with the length of the log, but with the
//     distinct keys (at most Options.MaxClients; the requests of keys
//     first seen past it are counted in Report.Untracked, not replayed)
//     and with their requests within one period: the
//     reader holds one line at a time (and one more, held while a time
//     jump is settled), and each key keeps, per limit, the times of its
//     requests within the last period (at most 65,536), which measure
//     its peak rate and what it got admitted; a key's times are released
//     as they expire. Suggestions replay candidates on GOMAXPROCS
//     replayers at once, each with its own keys and times.
//   - The report gives, per limit: requests, admitted, rejected, clients
//     and clients limited, the most limited clients (keys hashed by
//     core.KeyHash unless Options.ShowKeys), the busiest seconds, the
//     most one client got admitted in one period (a fixed window's
//     boundary burst), the distribution of the clients' peak rates, and,
//     when the sliding window counter is replayed, how its decisions
//     differ from the exact sliding window log's on the same traffic.
//   - With Options.TargetReject or TargetLimited, it suggests per
//     algorithm the smallest limit that rejects at most that share of
//     requests, or limits at most that share of clients: candidates come
//     from the clients' measures and are each replayed, so a suggestion
//     has met its target on this log. A target counts every client's
//     requests, an abuser's too: when one client sends half the
//     requests, any limit that refuses it much rejects more than a
//     small share of them, so the target keeps the limit near its peak.
//   - With Options.Headroom, it suggests per algorithm a limit sized
//     from the normal clients alone: the busiest normal client's peak
//     times Headroom (1.5: 50% over it), rounded up, replayed. A client
//     whose peak is more than Options.OutlierFactor (default 10) times
//     the median client's peak is an outlier, not a normal client
//     (NormalClients says why the median): every suggestion, of a target
//     or a headroom, says how many requests it would have refused each
//     of the busiest outliers, and how many normal clients it limits.
//
// Report.WriteHTML writes the report as one self-contained HTML page
// with inline SVG charts.
package replay
