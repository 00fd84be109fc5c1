module github.com/ratekit/ratekit/examples

go 1.24.0

require github.com/ratekit/ratekit v0.0.0

require (
	github.com/stretchr/testify v1.12.1
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

replace github.com/ratekit/ratekit => ../
