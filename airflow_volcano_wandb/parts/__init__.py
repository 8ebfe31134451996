"""The parts the operator and the sensor are made of, each built from its declared options."""
