// Command rules-quickstart serves a small API limited by the rate-limit
// rules of rules.yaml, in the directory it runs in, and applies each saved
// edit of that file while it runs.
//
// docs/rules.md shows main.go and rules.yaml as they are.
package main
