package rulesfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/ratekit/ratekit/rules"
	"go.yaml.in/yaml/v3"
)

// Limits that keep a hostile or broken file from exhausting memory or
// stack.
const (
	// maxErrors caps the errors Parse reports for one file.
	maxErrors = 100
	// maxDepth caps the nesting of descriptors: each level lengthens
	// the path and the identity of every descriptor below it, so the
	// cost of a document grows with its descriptors times their depth.
	maxDepth = 32
	// maxMetadata caps the values (YAML nodes, aliases expanded) of the
	// metadata of all the descriptors of a document, which the engine
	// keeps as parsed.
	maxMetadata = 10_000
	// maxList caps the entries of a replaces or method list.
	maxList = 100
	// aliasSlack and aliasFactor bound the nodes Parse visits to
	// aliasFactor times the nodes in the file plus aliasSlack, so that
	// aliases (which yaml.v3 leaves unexpanded in a yaml.Node) cannot
	// expand a small file into a huge Config.
	aliasSlack  = 10000
	aliasFactor = 10
)

// Caps on a rules document, which with MaxSize bound what one document
// costs each server that loads it: at most about 70 MB of heap retained
// by an engine with the default memory store, and about a second of CPU
// to parse and load (docs/rules.md, "Limits of a document", says how it
// was measured). A document past a cap is refused with an error that
// names it, before the engine sees it; so are descriptors nested more
// than 32 deep, more than 10,000 metadata values in the document, and a
// replaces or method list of more than 100 entries. Every loader of
// documents applies them: Load, Watch and package rulesredis, whose
// documents Parse reads.
const (
	// MaxDescriptors is the most descriptors a document may hold,
	// counted at every level of nesting (aliases expanded): 20,000,
	// twice a large deployment's block list.
	MaxDescriptors = 20_000

	// MaxRateLimits is the most rate limits that count requests (a
	// requests_per_unit above 0, not unlimited) a document may hold:
	// 2,000. Each is a limit with counters of its own, which a memory
	// store gives a table of about 13 KiB even before any request; a
	// block-list entry (requests_per_unit: 0) or an unlimited one
	// counts only against MaxDescriptors.
	MaxRateLimits = 2_000
)

// Known keys of each mapping, in the order error messages list them.
var (
	topKeys        = []string{"domain", "descriptors", "cascade"}
	descriptorKeys = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric",
		"value_to_metric", "share_threshold", "quota_mode", "metadata", "match"}
	rateLimitKeys = []string{"unit", "requests_per_unit", "unit_multiplier", "unlimited", "name", "replaces",
		"algorithm", "burst", "soft_percent"}
	replacesKeys = []string{"name"}
	matchKeys    = []string{"method", "path"}
)

// Parse decodes a rules file: a YAML document in the schema of the Envoy
// rate-limit service (envoyproxy/ratelimit), with ratekit's extensions.
// source names the file in errors and becomes Config.Source; it is usually
// the file name.
//
// Parse checks the shape of the document: it rejects syntax errors, keys
// it does not know (so a misspelt key is never silently ignored), keys
// repeated in one mapping, values of the wrong kind or type (such as a
// mapping where a list belongs, or requests_per_unit: ten), negative
// integers, an empty document and a stream of more than one document.
// YAML anchors and aliases are expanded, within a bound on the expanded
// size. Scalars read as strings (key, value, name, unit, ...) keep their
// text, so value: 500 is "500"; an empty or null value is the field's
// zero value. Parse leaves the meaning of the rules (units, algorithms,
// names, duplicate descriptors) to rules.Engine.Load.
//
// Each problem is a *rules.Error with the source, the line and the path of
// the element; when there are several, they are joined with errors.Join.
// On error Parse returns the zero Config.
func Parse(source string, data []byte) (rules.Config, error) {
	p := &parser{source: source, active: make(map[*yaml.Node]bool)}
	root, err := p.document(data)
	if err != nil {
		return rules.Config{}, err
	}
	p.budget = aliasFactor*countNodes(root) + aliasSlack
	cfg := p.config(root)
	if len(p.errs) > 0 {
		return rules.Config{}, errors.Join(p.errs...)
	}
	return cfg, nil
}

// yamlErrorRE splits the "yaml: line N: msg" errors of yaml.v3.
var yamlErrorRE = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// document decodes data into its one YAML document's root node.
func (p *parser) document(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := decode(dec, &doc); {
	case err == io.EOF:
		return nil, p.newError(0, "", "empty document")
	case err != nil:
		return nil, p.yamlError(err, data)
	}
	if len(doc.Content) != 1 || isNull(doc.Content[0]) {
		return nil, p.newError(doc.Line, "", "empty document")
	}
	// Reject a second document, tolerating an empty one (as left by a
	// trailing "---").
	for {
		var next yaml.Node
		err := decode(dec, &next)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, p.yamlError(err, data)
		}
		if len(next.Content) == 1 && !isNull(next.Content[0]) {
			return nil, p.newError(next.Line, "", "more than one YAML document (a rules file holds one)")
		}
	}
	return doc.Content[0], nil
}

// decode runs dec.Decode, turning a panic inside yaml.v3 (which has had
// such bugs) into an error.
func decode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: internal error: %v", r)
		}
	}()
	return dec.Decode(n)
}

// yamlError converts an error from yaml.v3 about data into a
// *rules.Error.
func (p *parser) yamlError(err error, data []byte) error {
	m := yamlErrorRE.FindStringSubmatch(err.Error())
	if m == nil {
		return p.newError(0, "", "invalid YAML: "+yamlMessage(err.Error()))
	}
	line, _ := strconv.Atoi(m[1])
	return p.newError(problemLine(data, line, m[2]), "", "invalid YAML: "+yamlMessage(m[2]))
}

// yamlQuotedRE matches the file's text as yaml.v3 quotes it in a message
// (an anchor's name, a tag, a character).
var yamlQuotedRE = regexp.MustCompile(`'[^']*'`)

// yamlMessage bounds a yaml.v3 message: the file's text it quotes is cut
// as quote cuts it, and the whole to maxYAMLMessage bytes.
func yamlMessage(msg string) string {
	msg = yamlQuotedRE.ReplaceAllStringFunc(msg, func(q string) string {
		if r := []rune(q[1 : len(q)-1]); len(r) > 40 {
			return "'" + string(r[:40]) + "...'"
		}
		return q
	})
	if len(msg) > maxYAMLMessage {
		msg = strings.ToValidUTF8(msg[:maxYAMLMessage], "") + "..."
	}
	return msg
}

// maxYAMLMessage is the most of a yaml.v3 message an error keeps.
const maxYAMLMessage = 200

// problemLine returns the line of a YAML syntax error. yaml.v3 reports
// some, such as a key indented one space too few, at the line where the
// enclosing block starts; the line at fault is the first one at which the
// document, read up to and including it, fails with the same message. The
// search stops at a different error or after maxProblemLines lines, and
// then keeps the reported line.
func problemLine(data []byte, line int, msg string) int {
	if line < 1 {
		return line
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	for k := line; k <= len(lines) && k < line+maxProblemLines; k++ {
		var n yaml.Node
		err := decode(yaml.NewDecoder(bytes.NewReader(bytes.Join(lines[:k], nil))), &n)
		if err == nil || err == io.EOF {
			continue
		}
		if m := yamlErrorRE.FindStringSubmatch(err.Error()); m != nil && m[2] == msg {
			return k
		}
		return line
	}
	return line
}

// maxProblemLines bounds problemLine's search, which reads the document
// once per line.
const maxProblemLines = 200

// countNodes returns the number of nodes in the tree under n, not
// following aliases.
func countNodes(n *yaml.Node) int {
	c := 1
	for _, child := range n.Content {
		c += countNodes(child)
	}
	return c
}

// countExpanded returns the number of nodes in the tree under n,
// following aliases, or limit once it reaches limit.
func countExpanded(n *yaml.Node, limit int) int {
	c := 0
	var walk func(n *yaml.Node, depth int)
	walk = func(n *yaml.Node, depth int) {
		if c >= limit {
			return
		}
		c++
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			if depth < maxAliasDepth {
				walk(n.Alias, depth+1)
			}
			return
		}
		for _, child := range n.Content {
			walk(child, depth)
		}
	}
	walk(n, 0)
	return min(c, limit)
}

// maxAliasDepth bounds the aliases countExpanded follows within aliases:
// a cycle is yaml.v3's error to report, not a reason to loop.
const maxAliasDepth = 100

// A parser converts a document's nodes into a Config, collecting errors.
type parser struct {
	source string
	errs   []error
	// budget is the number of nodes left to visit.
	budget int
	// stopped is set when parsing gave up (too many errors, aliases or
	// levels); every method then returns at once.
	stopped bool
	// active holds the anchored nodes being converted, to catch an alias
	// inside its own anchor.
	active map[*yaml.Node]bool
	// nDescriptors, nLimits and nMetadata count the descriptors, the
	// counting rate limits and the metadata values converted, for
	// MaxDescriptors, MaxRateLimits and maxMetadata.
	nDescriptors, nLimits, nMetadata int
}

func (p *parser) newError(line int, path, msg string) *rules.Error {
	return &rules.Error{Source: p.source, Line: line, Path: path, Msg: msg}
}

// errorf records an error about the element at path on line.
func (p *parser) errorf(line int, path, format string, args ...any) {
	if p.stopped {
		return
	}
	if len(p.errs) == maxErrors {
		p.stop(line, path, "too many errors")
		return
	}
	p.errs = append(p.errs, p.newError(line, path, fmt.Sprintf(format, args...)))
}

// stop records a final error and stops parsing.
func (p *parser) stop(line int, path, msg string) {
	p.errs = append(p.errs, p.newError(line, path, msg))
	p.stopped = true
}

// open returns the node n stands for, following an alias, and a function
// to call when done with it; it returns a nil node when parsing stopped
// or the alias is invalid.
func (p *parser) open(n *yaml.Node, path string) (*yaml.Node, func()) {
	if p.stopped {
		return nil, nil
	}
	p.budget--
	if p.budget < 0 {
		p.stop(n.Line, path, "document too large once its aliases are expanded")
		return nil, nil
	}
	target := n
	if n.Kind == yaml.AliasNode {
		target = n.Alias
		if target == nil || target.Kind == yaml.AliasNode {
			p.errorf(n.Line, path, "invalid alias *%s", n.Value)
			return nil, nil
		}
		if p.active[target] {
			p.errorf(n.Line, path, "alias *%s is inside its own anchor", n.Value)
			return nil, nil
		}
	}
	if target.Anchor == "" {
		return target, func() {}
	}
	p.active[target] = true
	return target, func() { delete(p.active, target) }
}

// openValue is open for a value that may be left empty: it returns a nil
// node, and nothing to call, for a null or empty one too.
func (p *parser) openValue(n *yaml.Node, path string) (*yaml.Node, func()) {
	target, done := p.open(n, path)
	if target != nil && isNull(target) {
		done()
		return nil, nil
	}
	return target, done
}

// isNull reports whether n is an empty or null scalar.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names the kind of n for error messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!str":
			return "the string " + quote(n.Value)
		default:
			return quote(n.Value)
		}
	}
	return "an unexpected YAML node"
}

// quote quotes s for an error message, shortening it if long.
func quote(s string) string {
	const max = 40
	if r := []rune(s); len(r) > max {
		s = string(r[:max]) + "..."
	}
	return strconv.Quote(s)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// fields checks that n (already opened) is a mapping with string keys
// drawn from known, none repeated, and calls f for each entry with the
// key node and the unopened value node.
func (p *parser) fields(n *yaml.Node, path string, known []string, f func(key string, k, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, path, "want a mapping, got %s", describe(n))
		return
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content) && !p.stopped; i += 2 {
		k, done := p.open(n.Content[i], path)
		if k == nil {
			continue
		}
		done()
		if k.Kind != yaml.ScalarNode {
			p.errorf(k.Line, path, "want a string key, got %s", describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			p.errorf(k.Line, path, "merge keys (<<) are not supported")
			continue
		}
		if first, ok := seen[k.Value]; ok {
			p.errorf(k.Line, path, "key %s repeated (first at line %d)", quote(k.Value), first)
			continue
		}
		seen[k.Value] = k.Line
		if !contains(known, k.Value) {
			msg := fmt.Sprintf("unknown key %s", quote(k.Value))
			if s := suggest(k.Value, known); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			p.errorf(k.Line, path, "%s; known keys: %s", msg, strings.Join(known, ", "))
			continue
		}
		f(k.Value, k, n.Content[i+1])
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest returns the known key closest to key if it is a likely typo.
func suggest(key string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if d := editDistance(key, k, bestDist); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance returns the Levenshtein distance between a and b, or
// limit if it is at least limit.
func editDistance(a, b string, limit int) int {
	if len(a) > 64 || len(b) > 64 {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit)
}

// config converts the root node.
func (p *parser) config(root *yaml.Node) rules.Config {
	cfg := rules.Config{Source: p.source}
	n, done := p.open(root, "")
	if n == nil {
		return cfg
	}
	defer done()
	p.fields(n, "", topKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "domain":
			cfg.Domain = p.str(v, key)
			cfg.Line = k.Line
		case "descriptors":
			cfg.Descriptors = p.descriptors(v, key, 1)
		case "cascade":
			cfg.Cascade = p.boolean(v, key)
		}
	})
	return cfg
}

// descriptors converts a sequence of descriptors at nesting depth.
func (p *parser) descriptors(raw *yaml.Node, path string, depth int) []rules.Descriptor {
	n, done := p.openValue(raw, path)
	if n == nil {
		return nil
	}
	defer done()
	if n.Kind != yaml.SequenceNode {
		p.errorf(n.Line, path, "want a sequence of descriptors, got %s", describe(n))
		return nil
	}
	if depth > maxDepth {
		p.stop(n.Line, path, fmt.Sprintf("descriptors nested more than %d deep", maxDepth))
		return nil
	}
	ds := make([]rules.Descriptor, 0, len(n.Content))
	for i, item := range n.Content {
		if p.stopped {
			break
		}
		ds = append(ds, p.descriptor(item, index(path, i), depth))
	}
	if len(ds) == 0 {
		return nil
	}
	return ds
}

// descriptor converts one descriptor mapping.
func (p *parser) descriptor(raw *yaml.Node, path string, depth int) rules.Descriptor {
	var d rules.Descriptor
	n, done := p.open(raw, path)
	if n == nil {
		return d
	}
	defer done()
	if p.nDescriptors++; p.nDescriptors > MaxDescriptors {
		p.stop(n.Line, path, fmt.Sprintf("more than %d descriptors, the most a rules document may hold (rulesfile.MaxDescriptors)", MaxDescriptors))
		return d
	}
	d.Line = n.Line
	p.fields(n, path, descriptorKeys, func(key string, k, v *yaml.Node) {
		sub := join(path, key)
		switch key {
		case "key":
			d.Key = p.str(v, sub)
			d.Line = k.Line
		case "value":
			d.Value = p.str(v, sub)
		case "rate_limit":
			d.RateLimit = p.rateLimit(k, v, sub)
		case "descriptors":
			d.Descriptors = p.descriptors(v, sub, depth+1)
		case "shadow_mode":
			d.ShadowMode = p.boolean(v, sub)
		case "detailed_metric":
			d.DetailedMetric = p.boolean(v, sub)
		case "value_to_metric":
			d.ValueToMetric = p.boolean(v, sub)
		case "share_threshold":
			d.ShareThreshold = p.boolean(v, sub)
		case "quota_mode":
			d.QuotaMode = p.boolean(v, sub)
		case "metadata":
			d.Metadata = p.metadata(v, sub)
		case "match":
			d.Match = p.match(k, v, sub)
		}
	})
	return d
}

// rateLimit converts the rate_limit mapping v, whose key is k.
func (p *parser) rateLimit(k, raw *yaml.Node, path string) *rules.RateLimit {
	n, done := p.openValue(raw, path)
	if n == nil {
		return nil
	}
	defer done()
	rl := &rules.RateLimit{Line: k.Line}
	p.fields(n, path, rateLimitKeys, func(key string, _, v *yaml.Node) {
		sub := join(path, key)
		switch key {
		case "unit":
			rl.Unit = p.str(v, sub)
		case "requests_per_unit":
			rl.RequestsPerUnit = p.count(v, sub)
		case "unit_multiplier":
			errs := len(p.errs)
			if rl.UnitMultiplier = p.count(v, sub); rl.UnitMultiplier == 0 && len(p.errs) == errs {
				p.errorf(v.Line, sub, "unit_multiplier must be at least 1")
			}
		case "unlimited":
			rl.Unlimited = p.boolean(v, sub)
		case "name":
			rl.Name = p.str(v, sub)
		case "replaces":
			rl.Replaces = p.replaces(v, sub)
		case "algorithm":
			rl.Algorithm = p.str(v, sub)
		case "burst":
			rl.Burst = p.count(v, sub)
		case "soft_percent":
			rl.SoftPercent = p.count(v, sub)
		}
	})
	if !rl.Unlimited && rl.RequestsPerUnit > 0 {
		if p.nLimits++; p.nLimits > MaxRateLimits {
			p.stop(k.Line, path, fmt.Sprintf("more than %d rate limits with requests_per_unit above 0, the most a rules document may hold (rulesfile.MaxRateLimits)", MaxRateLimits))
		}
	}
	return rl
}

// replaces converts the Envoy form of replaces, a sequence of {name: N}
// mappings, into the list of names.
func (p *parser) replaces(raw *yaml.Node, path string) []string {
	n, done := p.openValue(raw, path)
	if n == nil {
		return nil
	}
	defer done()
	if n.Kind != yaml.SequenceNode {
		p.errorf(n.Line, path, "want a sequence of {name: ...} mappings, got %s", describe(n))
		return nil
	}
	if len(n.Content) > maxList {
		p.errorf(n.Line, path, "%d names; at most %d", len(n.Content), maxList)
		return nil
	}
	names := make([]string, 0, len(n.Content))
	for i, raw := range n.Content {
		sub := index(path, i)
		item, done := p.open(raw, sub)
		if item == nil {
			continue
		}
		if item.Kind != yaml.MappingNode {
			p.errorf(item.Line, sub, "want a mapping such as {name: limit_name}, got %s", describe(item))
			done()
			continue
		}
		var name string
		p.fields(item, sub, replacesKeys, func(_ string, _, v *yaml.Node) {
			name = p.str(v, join(sub, "name"))
		})
		names = append(names, name)
		done()
	}
	if len(names) == 0 {
		return nil
	}
	return names
}

// match converts the match mapping v, whose key is k.
func (p *parser) match(k, raw *yaml.Node, path string) *rules.Match {
	n, done := p.openValue(raw, path)
	if n == nil {
		return nil
	}
	defer done()
	m := &rules.Match{Line: k.Line}
	p.fields(n, path, matchKeys, func(key string, _, v *yaml.Node) {
		sub := join(path, key)
		switch key {
		case "method":
			m.Methods = p.methods(v, sub)
		case "path":
			m.Path = p.str(v, sub)
		}
	})
	return m
}

// methods converts a method or a sequence of methods.
func (p *parser) methods(raw *yaml.Node, path string) []string {
	n, done := p.open(raw, path)
	if n == nil {
		return nil
	}
	defer done()
	switch {
	case isNull(n):
		return nil
	case n.Kind == yaml.ScalarNode:
		return []string{n.Value}
	case n.Kind != yaml.SequenceNode:
		p.errorf(n.Line, path, "want a method or a sequence of methods, got %s", describe(n))
		return nil
	case len(n.Content) > maxList:
		p.errorf(n.Line, path, "%d methods; at most %d", len(n.Content), maxList)
		return nil
	}
	ms := make([]string, 0, len(n.Content))
	for i, item := range n.Content {
		ms = append(ms, p.str(item, index(path, i)))
	}
	if len(ms) == 0 {
		return nil
	}
	return ms
}

// metadata returns Envoy's free-form metadata as plain values: maps,
// lists, strings, numbers and booleans.
func (p *parser) metadata(raw *yaml.Node, path string) any {
	n, done := p.openValue(raw, path)
	if n == nil {
		return nil
	}
	defer done()
	if p.nMetadata += countExpanded(n, maxMetadata-p.nMetadata+1); p.nMetadata > maxMetadata {
		p.stop(n.Line, path, fmt.Sprintf("more than %d metadata values in the document", maxMetadata))
		return nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		p.errorf(n.Line, path, "invalid metadata: %v", err)
		return nil
	}
	return v
}

// str returns the text of a scalar.
func (p *parser) str(raw *yaml.Node, path string) string {
	n, done := p.open(raw, path)
	if n == nil {
		return ""
	}
	defer done()
	switch {
	case isNull(n):
		return ""
	case n.Kind != yaml.ScalarNode:
		p.errorf(n.Line, path, "want a string, got %s", describe(n))
		return ""
	}
	return n.Value
}

// boolean returns the value of a true or false scalar.
func (p *parser) boolean(raw *yaml.Node, path string) bool {
	n, done := p.openValue(raw, path)
	if n == nil {
		return false
	}
	defer done()
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		p.errorf(n.Line, path, "want true or false, got %s", describe(n))
		return false
	}
	return b
}

// count returns the value of a non-negative integer scalar.
func (p *parser) count(raw *yaml.Node, path string) int {
	n, done := p.openValue(raw, path)
	if n == nil {
		return 0
	}
	defer done()
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		p.errorf(n.Line, path, "want a non-negative integer, got %s", describe(n))
		return 0
	}
	var v int64
	if err := n.Decode(&v); err != nil || v > math.MaxInt {
		p.errorf(n.Line, path, "integer %s out of range", quote(n.Value))
		return 0
	}
	if v < 0 {
		p.errorf(n.Line, path, "want a non-negative integer, got %d", v)
		return 0
	}
	return int(v)
}
