package ratekitecho5

import (
	"github.com/labstack/echo/v5"

	"github.com/ratekit/ratekit/rules"
)

// RulesRequest is the rules.Request that Rules decides c by, for tests
// that ask the engine what applies (rules.Engine.Matches).
func RulesRequest(c *echo.Context) rules.Request { return port.Request(call{C: c}) }
