// Consumer of an installed tessel: builds a mesh and a layout and prints the layout's text.
#include <iostream>

#include "tessel/tessel.h"

int main() {
  try {
    const tessel::Mesh mesh = tessel::Mesh::from_string("|x=2,y=2|*CPU");
    const tessel::Layout layout({"x", "unsharded"}, mesh);
    std::cout << "tessel " << TESSEL_VERSION_STRING << "\n" << layout.to_string() << "\n";
  } catch (const tessel::Error& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
