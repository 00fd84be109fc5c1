module github.com/ratekit/ratekit/examples

go 1.24.0

require github.com/ratekit/ratekit v0.0.0

replace github.com/ratekit/ratekit => ../
