// Consumer of an installed tessel: builds a mesh and a layout and prints the layout's text, then
// runs the README's C++ examples (a layout's local shape and shard map; the DTensor example with
// ops, gradients and a relayout plan) through the umbrella header alone, so that a header the
// umbrella misses breaks this build.
#include <iostream>

#include "tessel/tessel.h"

int main() {
  try {
    const tessel::Mesh mesh = tessel::Mesh::from_string("|x=2,y=2|*CPU");
    const tessel::Layout layout({"x", "unsharded"}, mesh);
    std::cout << "tessel " << TESSEL_VERSION_STRING << "\n" << layout.to_string() << "\n";

    // The README's first C++ example: a layout's local shape and its shard map.
    const tessel::Mesh readme_mesh = tessel::Mesh::create({{"x", 2}, {"y", 2}}, "CPU", "", 4);
    const tessel::Layout readme_layout({"x", "unsharded"}, readme_mesh);
    std::cout << "local shape " << readme_layout.local_shape_from_global_shape({10, 6}) << "\n"
              << tessel::visualize(readme_layout, {10, 6});

    tessel::Runtime rt({.num_cpu_devices = 4});
    const tessel::Mesh m = tessel::Mesh::create({{"batch", 2}, {"model", 2}});
    auto x = tessel::random_normal({16, 32}, tessel::Layout({"batch", "unsharded"}, m), 1, 0, 1,
                                   tessel::DType::kF32, &rt);
    auto w1 = tessel::random_normal({32, 64}, tessel::Layout({"unsharded", "model"}, m), 2, 0,
                                    0.05, tessel::DType::kF32, &rt);
    auto w2 = tessel::random_normal({64, 8}, tessel::Layout({"model", "unsharded"}, m), 3, 0,
                                    0.05, tessel::DType::kF32, &rt);
    const tessel::DTensor labels = tessel::copy_to_mesh(
        tessel::Tensor::zeros({16}, tessel::DType::kI32), tessel::Layout({"batch"}, m), rt);
    auto [loss, grads] = tessel::value_and_grad(
        [&](const std::vector<tessel::DTensor>& p) {
          auto logits = tessel::matmul(tessel::gelu(tessel::matmul(x, p[0])), p[1]);
          return tessel::reduce_mean(
              tessel::sparse_softmax_cross_entropy_with_logits(labels, logits));
        },
        {w1, w2});
    std::cout << "loss " << tessel::to_host(loss).to_doubles().at(0) << ", grad layouts "
              << (grads[0].layout() == w1.layout() && grads[1].layout() == w2.layout() ? "kept"
                                                                                       : "lost")
              << "\n"
              << tessel::plan_relayout({64, 64}, tessel::Layout({"batch", "unsharded"}, m),
                                       tessel::Layout({"unsharded", "batch"}, m));
  } catch (const tessel::Error& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "consumer: unexpected exception: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
