// Package rulesredis keeps the rate-limit rules of a fleet of servers in
// Redis, so that every server enforces the same rules and a change reaches
// them all within milliseconds.
//
// The rules are one YAML document, in the schema rulesfile.Parse reads,
// stored as a string under a Redis key of the application's choice (such
// as "ratekit:rules:api"; the key is used as given, never parsed). It is
// written by Publish, or by the ratekit-rules command, which checks it
// first, and read by Watch, on every server:
//
//	engine, err := rules.NewEngine(rules.WithKey("plan", planOf))
//	...
//	w, err := rulesredis.Watch(engine, rdb, "ratekit:rules:api")
//	if err != nil {
//		log.Fatal(err) // the key is missing or its document invalid, or Redis is down
//	}
//	defer w.Close()
//
// Publish sets the key and then publishes a message on the channel named
// by Channel (the key followed by ":changed"); each Watcher, subscribed to
// it, reads the key again at once. Watchers also poll the key (every five
// seconds by default, see WithPollInterval), which catches the messages
// lost while a server was disconnected and the documents set by other
// means, such as redis-cli SET. A document is loaded only when its
// content (its SHA-256) differs from the last one read.
//
// A bad version of the document (invalid YAML or schema, rules that the
// Target refuses, a value larger than MaxSize or not a string, a document
// past one of rulesfile's caps, such as rulesfile.MaxDescriptors) is refused
// by every server and logged by each, once, with
// rulesfile.LogRejected; the rules in force stay. Publish refuses such a
// document before storing it, with the same errors. When Redis cannot be
// reached, the rules in force stay too: the watcher logs one warning when
// the outage starts and one line when Redis answers again, and then
// reloads the document if it changed meanwhile.
//
// Give the client a read timeout, or go-redis's ContextTimeoutEnabled,
// so that a Redis that hangs does not hold a reload for long.
package rulesredis
