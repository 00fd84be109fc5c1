// Package readme holds every Go snippet of the repository's README.md inside
// code that compiles, and its test serves the framework quick starts on real
// servers.
//
// In README.md each ```go block follows a line
//
//	<!-- snippet: NAME -->
//
// and in this package the same lines sit between a line "// snippet: NAME"
// and a line "// end snippet", inside real functions (or around a file's
// import declaration, for a snippet that starts with one). A snippet made of
// several regions (its import declaration and its code) joins them with one
// blank line. TestReadmeSnippets fails when a block differs from its regions
// by one character (after removing the regions' common indentation), when a
// ```go block has no marker, and when a region has no block: edit both sides
// together.
//
// The identifiers a snippet uses but does not define (mux, r, e, app, lim,
// login, handleLogin, ...) are defined by the functions around it.
package readme
