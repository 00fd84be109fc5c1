package ratekitfiber

import (
	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/rules"
)

// RulesRequest is the rules.Request that Rules decides c by, for tests
// that ask the engine what applies (rules.Engine.Matches).
func RulesRequest(c *fiber.Ctx) rules.Request { return port{}.Request(c) }
