package rulesfile

import (
	"fmt"
	"io"
	"os"
)

// MaxSize is the largest rules file, in bytes, that Load and Watch read:
// 4 MiB, far beyond any real set of rules. A larger file is refused with
// an error naming its path, after reading no more than MaxSize+1 bytes of
// it, so that a file that grows without end (a mistaken path to a log)
// cannot exhaust memory.
const MaxSize = 4 << 20

// readFile reads the file at path, refusing one over MaxSize bytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("rulesfile: %s is larger than %d bytes; is it the rules file?", path, MaxSize)
	}
	return data, nil
}
