"""Pure replay logic and shared types: configuration, logging, scenario types, plan, guards."""
