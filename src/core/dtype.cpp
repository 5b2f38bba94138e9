// TODO: being implemented
