module github.com/ratekit/ratekit/examples

go 1.24.0

require (
	github.com/prometheus/client_golang v1.23.2
	github.com/ratekit/ratekit v0.0.0
	github.com/ratekit/ratekit/prometheus v0.0.0
	github.com/ratekit/ratekit/redisstore v0.0.0
	github.com/redis/go-redis/v9 v9.22.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.66.1 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/sys v0.35.0 // indirect
	google.golang.org/protobuf v1.36.8 // indirect
)

require (
	github.com/stretchr/testify v1.12.1
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

replace github.com/ratekit/ratekit => ../

replace github.com/ratekit/ratekit/redisstore => ../redisstore

replace github.com/ratekit/ratekit/prometheus => ../prometheus
